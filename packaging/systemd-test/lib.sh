# lib.sh — what the scripts that run inside the systemd test guests (the
# nspawn container and the cgroup v2 VM) share: check lines, fail-fast
# assertions, the testcase runner and the helpers every scenario uses.
# Sourced, POSIX sh (dash in the guests).
#
# Every check prints one line the host collects:
#   systemd-test: PASS NAME
#   systemd-test: FAIL NAME: WHY
#   systemd-test: SKIP NAME: WHY
# and the run ends with "systemd-test: DONE pass=P fail=F skip=S".
# A check that cannot tell right from wrong must not PASS.
#
# A guest script is a list of testcase_NAME functions run by
# run_testcases (below), each in a subshell: a failed assertion prints its
# FAIL line and ends that testcase, the runner goes on with the next one.
# A testcase sets up what it needs itself (the helpers are idempotent), so
# that any one of them can run alone after the install:
#   SCHEDPOLICYD_TEST_MATCH=REGEX  runs only the testcases whose function
#   name (testcase_NAME) matches the extended regular expression; the
#   install and the purge (--always) run whatever it says.

unit=schedpolicyd.service
conf=/etc/schedpolicyd/schedpolicyd.conf
state=/var/lib/schedpolicyd/state.json
iface=org.schedpolicyd.SchedPolicy1
obj=/org/schedpolicyd/SchedPolicy1
v2=0
[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && v2=1
# The runner's files: the results of every check (testcases run in
# subshells) and the markers of once.
st_dir=${SYSTEMD_TEST_DIR:-/run/systemd-test}

# --- Check lines ----------------------------------------------------------------
st_result() { mkdir -p "$st_dir" && echo "$1" >>"$st_dir/results"; }
pass() { st_result pass; echo "systemd-test: PASS $1"; }
fail() { st_result fail; echo "systemd-test: FAIL $1: $2"; }
skip() { st_result skip; echo "systemd-test: SKIP $1: $2"; }
note() { echo "systemd-test: $*"; }
st_n() { grep -cx "$1" "$st_dir/results" 2>/dev/null || true; }
done_checks() {
	echo "systemd-test: DONE pass=$(st_n pass) fail=$(st_n fail) skip=$(st_n skip)"
	[ "$(st_n fail)" = 0 ]
}

# --- Fail-fast assertions -------------------------------------------------------
# check NAME names the check the assertions after it belong to; a failed
# assertion prints "FAIL NAME: what was expected, what was found" and ends
# the testcase (its subshell), so that no later check passes on a premise
# that did not hold. The PASS line stays the check's own (pass "...").
check() { st_check=$1; }
# fail_now WHY: FAIL the current check with WHY and end the testcase (for
# a diagnostic richer than expected/found: `cond || fail_now "$(...)"`,
# evaluated only when cond fails).
fail_now() {
	fail "${st_check:-${st_case:-guest}}" "$1"
	exit 1
}
# assert_eq FOUND EXPECTED, assert_ne FOUND UNEXPECTED.
assert_eq() { [ "$1" = "$2" ] || fail_now "expected '$2', found '$1'"; }
assert_ne() { [ "$1" != "$2" ] || fail_now "expected anything but '$2', found it"; }
# assert_in REGEX TEXT: some line of TEXT matches the extended REGEX;
# assert_not_in REGEX TEXT: none does.
assert_in() { printf '%s\n' "$2" | grep -Eq -- "$1" || fail_now "expected a match of /$1/, found '$(printf '%s' "$2" | tail -n 8)'"; }
assert_not_in() {
	printf '%s\n' "$2" | grep -Eq -- "$1" || return 0
	fail_now "expected no match of /$1/, found '$(printf '%s\n' "$2" | grep -E -- "$1" | head -n 4)'"
}
# assert_le A B: integers, A <= B.
assert_le() { [ "$1" -le "$2" ] 2>/dev/null || fail_now "expected at most $2, found '$1'"; }
# assert_rc RC CMD...: CMD exits with RC; assert_true CMD...: with 0;
# assert_false CMD...: with anything else.
assert_rc() {
	ar_want=$1
	shift
	"$@" >/dev/null 2>&1
	ar_rc=$?
	[ "$ar_rc" = "$ar_want" ] || fail_now "expected exit $ar_want from '$*', found $ar_rc"
}
assert_true() { assert_rc 0 "$@"; }
assert_false() { ! "$@" >/dev/null 2>&1 || fail_now "expected '$*' to fail, it succeeded"; }
# assert_wait SECONDS CMD...: CMD succeeds within SECONDS (wait_until).
assert_wait() {
	aw_s=$1
	shift
	wait_until "$aw_s" "$@" || fail_now "expected within $aw_s s: $*"
}

# --- The runner -----------------------------------------------------------------
# run_testcases [--always] NAME...: runs testcase_NAME for each NAME in the
# order given (later ones build on the machine the earlier ones left, as
# an administrator's machine does, and set up what they need themselves),
# each in a subshell: its traps, variables and a failed assertion's exit
# stay inside. SCHEDPOLICYD_TEST_MATCH (an extended regular expression)
# picks the testcases whose function name matches; one marked --always
# runs anyway (the install and the purge). A filter that matches no
# testcase is a FAIL, not an empty pass. Ends with the DONE line; its
# status is 0 when no check failed. With SYSTEMD_TEST_LIST=1 it only prints
# the names of the testcases the filter picked (run.sh asks before booting
# a guest) and runs nothing. systemd's own test/units run_testcases and TEST_MATCH_TESTCASE
# are the model; they find the functions by name, dash cannot list them.
run_testcases() {
	rt_match=${SCHEDPOLICYD_TEST_MATCH:-}
	rt_list=${SYSTEMD_TEST_LIST:-0}
	rt_ran=0 rt_always=0
	[ "$rt_list" = 1 ] || { mkdir -p "$st_dir" && : >"$st_dir/results"; }
	for rt_n in "$@"; do
		if [ "$rt_n" = --always ]; then
			rt_always=1
			continue
		fi
		rt_fn=testcase_$rt_n
		if [ "$rt_always" = 0 ] && [ -n "$rt_match" ] && ! echo "$rt_fn" | grep -Eq -- "$rt_match"; then
			[ "$rt_list" = 1 ] || note "not run: $rt_fn (SCHEDPOLICYD_TEST_MATCH=$rt_match)"
			continue
		fi
		if [ "$rt_always" = 1 ]; then
			rt_always=0
		else
			rt_ran=$((rt_ran + 1))
			[ "$rt_list" = 1 ] && echo "$rt_fn"
		fi
		[ "$rt_list" = 1 ] && continue
		if ! command -v "$rt_fn" >/dev/null 2>&1; then
			fail "$rt_fn" "no such testcase in the guest script"
			continue
		fi
		note "--- $rt_fn"
		rt_fails=$(st_n fail) rt_t0=$(date +%s)
		(
			st_case=$rt_fn st_check=$rt_fn
			"$rt_fn"
			exit 0
		)
		rt_rc=$?
		# Past its end it exits 0; a failed assertion exits 1 after its
		# FAIL line; anything else (set -u, a syntax error) is a FAIL too.
		if [ "$rt_rc" != 0 ] && [ "$(st_n fail)" = "$rt_fails" ]; then
			fail "$rt_fn" "ended with exit $rt_rc and no FAIL line"
		fi
		note "--- $rt_fn: $(($(date +%s) - rt_t0)) s$([ "$rt_rc" = 0 ] || echo ", stopped at its first failed check")"
	done
	[ "$rt_list" = 1 ] && return 0
	[ -z "$rt_match" ] || [ "$rt_ran" -gt 0 ] || fail "SCHEDPOLICYD_TEST_MATCH" "'$rt_match' matches no testcase here"
	done_checks
}

# once NAME CMD...: CMD the first time a testcase of this run asks (setup
# several testcases share; a marker file, as testcases run in subshells).
once() {
	on_n=$1
	shift
	[ -e "$st_dir/once-$on_n" ] && return 0
	mkdir -p "$st_dir" && : >"$st_dir/once-$on_n"
	"$@"
}

# excerpt TITLE CMD...: print CMD's output framed, for the closing record.
excerpt() {
	title=$1
	shift
	echo "----- $title -----"
	"$@" 2>&1 || true
	echo "----- end $title -----"
}

# --- Waiting, the journal ---------------------------------------------------------
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

# --- The daemon's unit --------------------------------------------------------------
# prop UNIT PROPERTY: the unit's property value as systemctl show gives it.
prop() { systemctl show -p "$2" --value "$1"; }

# main_pid UNIT: the unit's MainPID, or nothing when it has none (never 0:
# `kill -STOP 0` would stop the caller's own process group).
main_pid() {
	mp=$(prop "$1" MainPID)
	case $mp in '' | 0 | *[!0-9]*) return 1 ;; esac
	echo "$mp"
}
unit_running() { [ "$(systemctl is-active "$unit")" = active ]; }
# restarted_from PID: the daemon runs again, as another process than PID.
restarted_from() {
	np=$(main_pid "$unit") || return 1
	[ "$np" != "$1" ] && unit_running
}
# use_conf BASE [LINE...]: the daemon's configuration is the file BASE
# plus one line per LINE (printf %b: "\n" starts another).
use_conf() {
	cp "$1" "$conf"
	shift
	for uc_l in "$@"; do printf '%b\n' "$uc_l" >>"$conf"; done
}
# run_twice NAME: `schedpolicyctl run --name NAME` while a workload NAME
# runs; true when it is refused (exit 5, "already exists") and the daemon
# stays up: the same MainPID, no restart, no panic in its journal (r2_rc,
# r2_out and r2_pid for the check's line; else what differs on stdout).
# The seams issue's reproduction: the daemon once built that reply from
# an idle back end and died of a nil dereference on its loop.
run_twice() {
	r2_pid=$(main_pid "$unit") r2_rs=$(prop "$unit" NRestarts) r2_c=$(cursor)
	r2_out=$(schedpolicyctl run --name "$1" -- sleep 1 </dev/null 2>&1) && r2_rc=0 || r2_rc=$?
	sleep 1 # a daemon that died would be seen gone by now
	[ "$r2_rc" = 5 ] && echo "$r2_out" | grep -q 'already exists' &&
		[ "$(main_pid "$unit")" = "$r2_pid" ] && [ "$(prop "$unit" NRestarts)" = "$r2_rs" ] && unit_running &&
		! journal_since "$r2_c" SYSLOG_IDENTIFIER=schedpolicyd | grep -q 'panic' && return 0
	echo "exit $r2_rc: $r2_out; MainPID $r2_pid -> $(main_pid "$unit"), NRestarts $r2_rs -> $(prop "$unit" NRestarts); $(journal_since "$r2_c" -u "$unit" | tail -n 5)"
	return 1
}
# active_policy: the daemon's ActivePolicy on the bus (nothing when it
# does not answer; a read starts it by D-Bus activation when it is stopped).
active_policy() {
	busctl get-property "$iface" "$obj" "$iface" ActivePolicy 2>/dev/null | sed -n 's/^s "\(.*\)"$/\1/p'
}
is_policy() { [ "$(active_policy)" = "$1" ]; }
# set_policy POLICY: schedpolicyctl set POLICY and wait (30 s) until the
# bus says it.
set_policy() { schedpolicyctl set "$1" >/dev/null && wait_until 30 is_policy "$1"; }
# state_clean: state.json holds no value the daemon wrote.
state_clean() { ! grep -q '"applied_cpus"\|"pending_cpus"' "$state" 2>/dev/null; }
# bus_order LOG: "OWNED ACTIVATED", the dbus-monitor LOG's line numbers of
# our name's NameOwnerChanged (acquired) and of systemd's
# PropertiesChanged that turns the unit active (dbus_monitor_start). The
# bus orders both messages; the journal does not (it files a service's
# stdout and systemd's own lines as they arrive).
dbus_monitor_start() {
	dbus-monitor --system "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='$iface'" \
		"type='signal',path='/org/freedesktop/systemd1/unit/schedpolicyd_2eservice',member='PropertiesChanged'" </dev/null >"$1" 2>&1 &
	dm_pid=$!
	wait_until 10 grep -q NameAcquired "$1" || note "dbus-monitor did not start: $(cat "$1")"
}
bus_order() {
	kill "$dm_pid" 2>/dev/null
	wait "$dm_pid" 2>/dev/null
	owned=$(awk '/member=NameOwnerChanged/ { n = NR } n && NR == n + 1 && /"org.schedpolicyd.SchedPolicy1"/ { o = NR } o && NR == o + 2 && /string ":/ { print NR; exit }' "$1")
	activated=$(awk '/path=\/org\/freedesktop\/systemd1\/unit\/schedpolicyd_2eservice;.*member=PropertiesChanged/ { p = 1 } /^signal|^method/ && !/schedpolicyd_2eservice/ { p = 0 } p && /string "ActiveState"/ { a = NR } p && a && NR == a + 1 && /variant +string "active"/ { print NR; exit }' "$1")
	[ -n "$owned" ] && [ -n "$activated" ] && [ "$owned" -lt "$activated" ]
}
# bus_owner_pid: the PID owning our bus name.
bus_owner_pid() { busctl --system status --no-pager "$iface" 2>/dev/null | sed -n 's/^PID=//p'; }

# --- CPUs, units and what they may run on -------------------------------------------
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
# one_cpu LIST: the cpulist names exactly one CPU.
one_cpu() { [ -n "$1" ] && [ "$(echo "$1" | tr -cd ',-')" = "" ]; }

# cpus_allowed PID: the task's Cpus_allowed_list (/proc/PID/status), what
# the scheduler really lets it run on; nothing when the task is gone.
cpus_allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null; }

# sc UNIT: the unit's AllowedCPUs= as systemd reports it (empty while unset).
sc() { systemctl show -p AllowedCPUs --value "$1" 2>/dev/null; }
# wait_set SECONDS UNIT / wait_unset SECONDS UNIT: until UNIT's
# AllowedCPUs= is set / unset.
wait_set() { wait_until "$1" sh -c "[ -n \"\$(systemctl show -p AllowedCPUs --value $2)\" ]"; }
wait_unset() { wait_until "$1" sh -c "[ -z \"\$(systemctl show -p AllowedCPUs --value $2)\" ]"; }
# ucpus NAME / wl_class NAME: the cpulist / class schedpolicyctl reports
# for workload NAME (nothing when it is none).
ucpus() { schedpolicyctl workloads 2>/dev/null | awk -v n="$1" '$1 == n { print $3 }'; }
wl_class() { schedpolicyctl workloads 2>/dev/null | awk -v n="$1" '$1 == n { print $2 }'; }
# workloads_are NAME...: each NAME is a workload; wait_workloads SECONDS
# NAME...: until they are.
workloads_are() {
	schedpolicyctl workloads >/tmp/workloads_are 2>/dev/null || return 1
	for wa_n in "$@"; do grep -q "^$wa_n " /tmp/workloads_are || return 1; done
}
wait_workloads() {
	ww_s=$1
	shift
	wait_until "$ww_s" workloads_are "$@"
}
# unit_pid UNIT: the unit's main process, else the first task of its
# cgroup (cgroup v2); nothing when it has neither.
unit_pid() {
	up_pid=$(prop "$1" MainPID 2>/dev/null)
	case $up_pid in '' | 0) ;; *) echo "$up_pid"; return ;; esac
	up_cg=$(prop "$1" ControlGroup 2>/dev/null)
	[ -n "$up_cg" ] && head -n 1 "/sys/fs/cgroup$up_cg/cgroup.procs" 2>/dev/null
}
# unit_cg UNIT: the unit's cgroup directory (cgroup v2).
unit_cg() { echo "/sys/fs/cgroup$(systemctl show -p ControlGroup --value "$1")"; }
# placed_ok ALLOWED PID CGROUP "UNITS" [noctl]: for every unit, what its
# task may use is what its AllowedCPUs= gives (every online CPU, or $all
# where the caller set it, while unset) and what schedpolicyctl says (not
# with noctl); where AllowedCPUs= is set, the unit's cpuset.cpus.effective
# says so too. ALLOWED, PID and CGROUP are functions of a unit's name: its
# AllowedCPUs=, its task, its cgroup directory. On cgroup v1, where
# systemd applies nothing, only what schedpolicyctl says is compared. On
# failure it prints the first unit that differs and how.
placed_ok() {
	po_all=${all:-$(cat /sys/devices/system/cpu/online)}
	for n in $4; do
		a=$($1 "$n")
		want=${a:-$po_all}
		ctl=$want
		[ "${5:-}" = noctl ] || ctl=$(ucpus "$n")
		if [ "$v2" = 0 ]; then
			[ "$ctl" = "$want" ] || { echo "$n: AllowedCPUs=$a schedpolicyctl=$ctl"; return 1; }
			continue
		fi
		pid=$($2 "$n")
		[ -n "$pid" ] || { echo "$n: no task"; return 1; }
		task=$(cpus_allowed "$pid")
		[ "$task" = "$want" ] && [ "$ctl" = "$want" ] || { echo "$n: AllowedCPUs=$a task=$task schedpolicyctl=$ctl"; return 1; }
		if [ -n "$a" ]; then
			eff=$(cat "$($3 "$n")/cpuset.cpus.effective" 2>/dev/null)
			[ "$eff" = "$a" ] || { echo "$n: AllowedCPUs=$a cpuset.cpus.effective=$eff"; return 1; }
		fi
	done
}
# units_ok "UNITS" [noctl]: placed_ok for units of the system manager.
units_ok() { placed_ok sc unit_pid unit_cg "$1" "${2:-}"; }

# --- The lingering user sptest ------------------------------------------------------
# user_setup: the user exists; uid, um (its manager's unit) and ucg (its
# cgroup) are set.
user_setup() {
	id -u sptest >/dev/null 2>&1 || useradd -m -s /bin/sh sptest
	uid=$(id -u sptest)
	um=user@$uid.service
	ucg=/sys/fs/cgroup/user.slice/user-$uid.slice/$um
}
# user_linger SECONDS: the user lingers and its manager listens. Active
# too, not the socket alone: a manager still stopping (linger just
# disabled) has its socket until it is gone.
user_linger() {
	user_setup
	loginctl enable-linger sptest
	wait_until "$1" sh -c "systemctl is-active --quiet $um && test -S /run/user/$uid/systemd/private"
}
# ur CMD...: CMD as the user, in its session's environment; usc UNIT: a
# unit's AllowedCPUs= in the user's manager.
ur() { runuser -u sptest -- env XDG_RUNTIME_DIR="/run/user/$uid" "$@"; }
usc() { ur systemctl --user show -p AllowedCPUs --value "$1" 2>/dev/null; }
# user_delegate on|default|masked: whether the user's manager gets cpuset.
# on: docs/USERS.md's drop-in written beside the package's; default: the
# package's own drop-in (50-schedpolicyd-delegate-cpuset.conf) decides, as
# installed; masked: an administrator's undo, the package's drop-in masked
# under /etc (and ours gone), so cpuset is not delegated. The user's
# manager is restarted with it.
user_delegate() {
	ud_d=/etc/systemd/system/user@.service.d
	mkdir -p "$ud_d"
	rm -f "$ud_d/50-delegate-cpuset.conf" "$ud_d/50-schedpolicyd-delegate-cpuset.conf"
	case $1 in
	on) printf '[Service]\nDelegate=pids memory cpu cpuset\n' >"$ud_d/50-delegate-cpuset.conf" ;;
	masked) ln -s /dev/null "$ud_d/50-schedpolicyd-delegate-cpuset.conf" ;;
	esac
	systemctl daemon-reload
	systemctl restart "$um"
	wait_until 60 test -S "/run/user/$uid/systemd/private"
}

# energy_prefs (issue 34 item 3), in both guests: neither the VM nor the
# container (this machine's /sys, read-only there) has a cpufreq driver or
# an ACPI platform profile, so the daemon, which ran on battery in the
# VM's testcases before, wrote no energy preference: probe says why,
# state.json holds no record of one, the journal has no change of one.
testcase_energy_prefs() {
	check energy-prefs-nothing
	if [ -e /sys/devices/system/cpu/cpu0/cpufreq/scaling_driver ] || [ -e /sys/firmware/acpi/platform_profile ]; then
		skip energy-prefs-nothing "this guest has a cpufreq driver or a platform profile"
		return
	fi
	ep_out=$(schedpolicyd probe 2>&1)
	assert_in '^epp: +not offered: no cpufreq driver' "$ep_out"
	assert_in '^platform_profile: +not offered: no firmware/acpi/platform_profile' "$ep_out"
	assert_false grep -q '"energy_prefs"' /var/lib/schedpolicyd/state.json
	assert_false sh -c "journalctl -u $unit --no-pager | grep -q 'energy preferences changed'"
	pass "energy-prefs-nothing: $(printf '%s\n' "$ep_out" | grep -E '^(epp|platform_profile):' | tr -s ' ' | tr '\n' ';')"
}


# --- Go tests --------------------------------------------------------------------------
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
