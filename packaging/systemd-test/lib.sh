# lib.sh — check helpers for the scripts that run inside the systemd test
# guests (the nspawn container and the cgroup v2 VM). Sourced, POSIX sh.
#
# Every check prints one line the host collects:
#   systemd-test: PASS NAME
#   systemd-test: FAIL NAME: WHY
#   systemd-test: SKIP NAME: WHY
# and the guest script ends with "systemd-test: DONE pass=P fail=F skip=S".
# A check that cannot tell right from wrong must not PASS.

st_pass=0 st_fail=0 st_skip=0

pass() { st_pass=$((st_pass + 1)); echo "systemd-test: PASS $1"; }
fail() { st_fail=$((st_fail + 1)); echo "systemd-test: FAIL $1: $2"; }
skip() { st_skip=$((st_skip + 1)); echo "systemd-test: SKIP $1: $2"; }
note() { echo "systemd-test: $*"; }
done_checks() {
	echo "systemd-test: DONE pass=$st_pass fail=$st_fail skip=$st_skip"
	[ "$st_fail" = 0 ]
}

# excerpt TITLE CMD...: print CMD's output framed, for the closing record.
excerpt() {
	title=$1
	shift
	echo "----- $title -----"
	"$@" 2>&1 || true
	echo "----- end $title -----"
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds; fails
# after SECONDS.
wait_until() {
	wu_limit=$(($1 * 5))
	shift
	wu_i=0
	while ! "$@" >/dev/null 2>&1; do
		wu_i=$((wu_i + 1))
		[ "$wu_i" -ge "$wu_limit" ] && return 1
		sleep 0.2
	done
	return 0
}

# prop UNIT PROPERTY: the unit's property value as systemctl show gives it.
prop() { systemctl show -p "$2" --value "$1"; }

# main_pid UNIT: the unit's MainPID, or nothing when it has none (never 0:
# `kill -STOP 0` would stop the caller's own process group).
main_pid() {
	mp=$(prop "$1" MainPID)
	case $mp in '' | 0 | *[!0-9]*) return 1 ;; esac
	echo "$mp"
}

# cursor: a journal cursor to read from later (journal_since CURSOR ...).
cursor() { journalctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'; }
# journal_since CURSOR [MATCHES...]: the entries after CURSOR (those
# matching MATCHES, e.g. -u UNIT). Not `--after-cursor` with matches alone:
# journalctl (252) seeks to the cursor and skips two entries that match,
# taking the first for the cursor's own, so when the cursor's entry does not
# match (a line of the test script, before -u UNIT) the first entry that
# does is lost. --cursor shows the cursor's entry only if it matches.
journal_since() {
	jc=$1
	shift
	if [ "$(journalctl --no-pager -o export --cursor="$jc" "$@" 2>/dev/null | sed -n '1{s/^__CURSOR=//p;q;}')" = "$jc" ]; then
		journalctl --no-pager -o short-monotonic --after-cursor="$jc" "$@"
	else
		journalctl --no-pager -o short-monotonic --cursor="$jc" "$@"
	fi
}

# journal_wait CURSOR SECONDS PATTERN: wait until a journal entry after
# CURSOR matches the grep pattern (journald may file a service's stdout
# lines after systemd's own); fails after SECONDS.
journal_wait() {
	jw_i=0
	while ! journalctl --no-pager --after-cursor="$1" | grep -q -e "$3"; do
		jw_i=$((jw_i + 1))
		[ "$jw_i" -ge $(($2 * 5)) ] && return 1
		sleep 0.2
	done
	return 0
}

# cpulist_count LIST: how many CPUs a kernel cpulist ("0-3,8", "") names.
cpulist_count() {
	echo "$1" | awk -F, '{
		n = 0
		for (i = 1; i <= NF; i++) {
			if ($i == "") continue
			if (split($i, r, "-") == 2) n += r[2] - r[1] + 1
			else n++
		}
		print n
	}'
}

# cpus_allowed PID: the task's Cpus_allowed_list (/proc/PID/status), what
# the scheduler really lets it run on; nothing when the task is gone.
cpus_allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null; }

# Units and what they may run on (systemd tests of placement):
# sc UNIT: the unit's AllowedCPUs= as systemd reports it (empty while unset).
sc() { systemctl show -p AllowedCPUs --value "$1"; }
# ucpus NAME: the cpulist schedpolicyctl reports for workload NAME.
ucpus() { schedpolicyctl workloads | awk -v n="$1" '$1 == n { print $3 }'; }
# unit_pid UNIT: the unit's main process, else the first task of its cgroup.
unit_pid() { systemctl show -p MainPID --value "$1" | grep -v '^0$' || cat "/sys/fs/cgroup$(systemctl show -p ControlGroup --value "$1")/cgroup.procs" 2>/dev/null | head -n 1; }
# unit_cg UNIT: the unit's cgroup directory (cgroup v2).
unit_cg() { echo "/sys/fs/cgroup$(systemctl show -p ControlGroup --value "$1")"; }
# placed_ok ALLOWED PID CGROUP "UNITS" [noctl]: for every unit, what its
# task may use is what its AllowedCPUs= gives (every online CPU, or $all
# where the caller set it, while unset) and what schedpolicyctl says (not
# with noctl); where AllowedCPUs= is set, the unit's cpuset.cpus.effective
# says so too. ALLOWED, PID and CGROUP are functions of a unit's name: its
# AllowedCPUs=, its task, its cgroup directory. On failure it prints the
# first unit that differs and how.
placed_ok() {
	po_all=${all:-$(cat /sys/devices/system/cpu/online)}
	for n in $4; do
		a=$($1 "$n")
		want=${a:-$po_all}
		pid=$($2 "$n")
		[ -n "$pid" ] || { echo "$n: no task"; return 1; }
		task=$(cpus_allowed "$pid")
		ctl=$want
		[ "${5:-}" = noctl ] || ctl=$(ucpus "$n")
		[ "$task" = "$want" ] && [ "$ctl" = "$want" ] || { echo "$n: AllowedCPUs=$a task=$task schedpolicyctl=$ctl"; return 1; }
		if [ -n "$a" ]; then
			eff=$(cat "$($3 "$n")/cpuset.cpus.effective" 2>/dev/null)
			[ "$eff" = "$a" ] || { echo "$n: AllowedCPUs=$a cpuset.cpus.effective=$eff"; return 1; }
		fi
	done
}

# gotest BINARY PATTERN [ENV=VALUE...]: run a Go test binary's tests
# matching PATTERN (-test.v) with the environment given, and turn each
# top-level "--- PASS/FAIL/SKIP: TestName" into a check line; its output
# is kept in /tmp/gotest-NAME.log and printed on failure.
gotest() {
	gt_bin=$1 gt_pat=$2
	shift 2
	gt_log=/tmp/gotest-$(basename "$gt_bin").log
	env "$@" "$gt_bin" -test.v -test.count=1 -test.timeout=10m -test.run "$gt_pat" >"$gt_log" 2>&1
	gt_rc=$?
	gt_n=0
	while read -r gt_word gt_res gt_name gt_rest; do
		[ "$gt_word" = "---" ] || continue
		gt_name=${gt_name%:}
		gt_n=$((gt_n + 1))
		case $gt_res in
		PASS:)
			pass "go test $gt_name $gt_rest"
			awk -v n="$gt_name" '$0 ~ "^=== RUN +" n "$" { p = 1; next } p && $0 ~ "^--- PASS: " n " " { exit } p && /^ +[a-z_]+\.go:[0-9]+: / { sub(/^ +/, ""); print "systemd-test:   " $0 }' "$gt_log"
			;;
		SKIP:) skip "go test $gt_name" "$(grep -A2 -e "--- SKIP: $gt_name" "$gt_log" | sed -n 2p | sed 's/^ *//')" ;;
		*) fail "go test $gt_name" "$(awk -v n="$gt_name" '$0 ~ "^=== RUN +" n "$" { p = 1; next } p && $0 ~ "^--- FAIL: " n " " { exit } p && !/^=== / { print }' "$gt_log" | tail -n 30)" ;;
		esac
	done <<GT_EOF
$(grep -E '^--- (PASS|FAIL|SKIP): ' "$gt_log")
GT_EOF
	if [ "$gt_n" = 0 ] || { [ "$gt_rc" != 0 ] && ! grep -q '^--- FAIL' "$gt_log"; }; then
		fail "go test $(basename "$gt_bin") -run $gt_pat" "exit $gt_rc: $(tail -n 30 "$gt_log")"
	fi
}
