# surface.sh — the systemd surface, live (issue 24, item 7): what an
# administrator does every day to the units the daemon places, under the
# real systemd 252 of the container (cgroup v1) and of the VM (cgroup v2),
# each with a kill -9 of the daemon in the middle. The testcases
# (testcase_NAME, in the order of $surface_testcases):
#
#   surface_runtwice  schedpolicyctl run --name X twice: refused, no crash
#   surface_setprop   systemctl set-property --runtime, also of the very
#                     value the daemon had set, also while the daemon is dead
#   surface_persist   systemctl set-property (persistent), then daemon-reload
#   surface_reload    systemctl daemon-reload with runtime values set: the
#                     daemon holds its units and lists them once after; how
#                     many AllowedCPUs= writes the reload caused
#   surface_reexec    systemctl daemon-reexec: units kept, UnitNew/JobRemoved
#                     still received (a timer's unit, with nobody else
#                     subscribed), Subscribe survives
#   surface_restart   a managed unit restarted, and one failing and
#                     restarted by Restart=on-failure
#   surface_fail      a managed unit failing for good (left failed)
#   surface_recreate  a unit file removed and created again under the same
#                     name, and a transient unit started again
#   surface_burst     300 transient services appearing and leaving at once
#   surface_users     a user logging out and in while their units are placed
#   surface_no_panic  no panic since the first of them, every restart of
#                     the daemon was one of our kills
#
# After each operation the daemon runs on what systemd says (a unit with an
# administrator's AllowedCPUs= has it, or a part of it; any other unit has
# what schedpolicyctl reports, and on cgroup v2 its task's
# Cpus_allowed_list is that), and after each scenario's stop every unit's
# AllowedCPUs= is what the administrator set or nothing, never a value of
# the daemon's (on v2 also its tasks' Cpus_allowed_list), and state.json
# holds no value of ours.
#
# Sourced after lib.sh by container-guest.sh and vm-guest.sh, which set
# base, the configuration file to start from; each testcase starts from
# surface_setup (placement "systemd" for schedpolicyd.slice, the daemon
# stopped) and cleans up after itself on its way out (trap), also after a
# failed assertion. Unit names start with "ss-".

s_all=$(cat /sys/devices/system/cpu/online 2>/dev/null)
# The testcases of this file, in their order (both guests run them all).
surface_testcases="surface_runtwice surface_setprop surface_persist surface_reload surface_reexec surface_restart surface_fail surface_recreate surface_burst surface_users surface_no_panic"

# s_cpus LIST: the CPU numbers of a cpulist, one a line.
s_cpus() { echo "$1" | awk -F, '{ for (i = 1; i <= NF; i++) { if (split($i, r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) print c } else if ($i != "") print $i } }'; }
# s_within A B: cpulist A is not empty and every CPU of A is in B.
s_within() {
	[ -n "$1" ] || return 1
	for s_c in $(s_cpus "$1"); do s_cpus "$2" | grep -qx "$s_c" || return 1; done
}
s_other() { s_cpus "$s_all" | grep -vx "$1" | head -n 1; }
# s_journal CURSOR PATTERN: the daemon's lines after CURSOR matching
# PATTERN; s_count: how many. By its SYSLOG_IDENTIFIER, not -u: journald
# files the first lines of a daemon systemd just restarted under
# init.scope at times (_SYSTEMD_UNIT of its stdout stream read before the
# process moved to its unit's cgroup; seen in the container after kill -9).
s_journal() { journal_since "$1" SYSLOG_IDENTIFIER=schedpolicyd | grep -e "$2"; }
s_count() { journal_since "$1" SYSLOG_IDENTIFIER=schedpolicyd | grep -c -e "$2"; }
s_seen() { s_journal "$1" "$2" >/dev/null; }
# s_snap [noctl] UNIT...: one reading of systemd (one systemctl show) and
# of the daemon (one schedpolicyctl workloads, not with noctl), as lines
# "UNIT ALLOWEDCPUS LOADSTATE PID CTL" ("-" for empty; PID its main
# process, else the first of its cgroup on v2): few processes to start
# in a polling loop, which under the VM's emulation is what costs.
s_snap() {
	: >/tmp/surface-wl
	if [ "$1" = noctl ]; then
		shift
	else
		schedpolicyctl workloads >/tmp/surface-wl 2>/dev/null
	fi
	systemctl show -p Id -p AllowedCPUs -p LoadState -p MainPID -p ControlGroup "$@" 2>/dev/null |
		awk -v v2="$v2" -v wl=/tmp/surface-wl '
			BEGIN {
				while ((getline l < wl) > 0)
					if (++n > 1 && split(l, f, " ") >= 3) c[f[1]] = f[3]
				close(wl)
			}
			function d(x) { return x == "" ? "-" : x }
			function out() {
				if (id == "") return
				if ((pid == "" || pid == "0") && v2 == 1 && cg != "") {
					pid = ""
					pf = "/sys/fs/cgroup" cg "/cgroup.procs"
					if ((getline pid < pf) <= 0) pid = ""
					close(pf)
				}
				print id, d(a), d(ls), (pid == "" || pid == "0" ? "-" : pid), d(c[id])
				id = a = ls = pid = cg = ""
			}
			/^$/ { out(); next }
			{ k = $0; sub(/=.*/, "", k); v = substr($0, length(k) + 2) }
			k == "Id" { id = v }
			k == "AllowedCPUs" { a = v }
			k == "LoadState" { ls = v }
			k == "MainPID" { pid = v }
			k == "ControlGroup" { cg = v }
			END { out() }'
}
# s_placed UNIT...: each UNIT is a workload with AllowedCPUs= set.
s_placed() { ! s_snap "$@" | awk '$2 == "-" || $5 == "-"' | grep -q .; }
s_unset() { ! s_snap noctl "$@" | awk '$2 != "-"' | grep -q .; }

# s_need NAME SECONDS CMD...: wait for a scenario's premise (CMD, as
# wait_until); a FAIL "surface-NAME" that ends the testcase if it is not
# reached, so that no check after it passes on a premise that did not hold.
s_need() {
	check "surface-$1"
	shift
	assert_wait "$@"
}

# s_start: the daemon running under powersaving (the start rate limit
# reset: the scenarios start it often).
s_start() {
	systemctl reset-failed "$unit" 2>/dev/null
	systemctl start "$unit"
	wait_until 60 unit_running && set_policy powersaving
}

# s_arm: note the daemon's PID and a cursor; s_fire: kill -9 of it, now
# (for "in the middle of" an operation: s_arm, the operation in the
# background, s_fire); s_kill9: both. Not through systemctl kill: during
# a daemon-reexec the manager does not answer. s_back: wait until systemd
# restarted it (Restart=on-failure) and it is ready. Each is a FAIL
# "surface-kill-9" that ends the testcase when it does not happen; every
# kill is counted for surface_no_panic.
s_arm() {
	s_pid9=$(main_pid "$unit")
	s_c9=$(cursor)
}
s_fire() {
	check surface-kill-9
	[ -n "$s_pid9" ] && kill -KILL "$s_pid9" || fail_now "no daemon to kill (MainPID '$s_pid9')"
	echo kill >>"$st_dir/surface-kills"
}
s_kill9() { s_arm && s_fire; }
s_back() {
	check surface-kill-9
	wait_until 90 restarted_from "$s_pid9" && journal_wait "$s_c9" 60 'schedpolicyd.*msg=ready' ||
		fail_now "not restarted and ready within 150 s of the kill -9 of $s_pid9: $(systemctl is-active "$unit"), MainPID $(prop "$unit" MainPID)"
}

# s_running "UNIT=ADMIN ...": the daemon runs on what systemd says (ADMIN
# "-": no value of the administrator's): a unit with one has it or a part
# of it; every other loaded unit that is a workload has what schedpolicyctl
# reports (every CPU while unset); on v2 a unit's task runs on its
# AllowedCPUs= (every CPU while unset). Says what differs.
s_running() {
	s_snap $(for s_pr in $1; do echo "${s_pr%%=*}"; done) >/tmp/surface-snap
	while read -r s_u s_a s_ls s_p s_ct; do
		s_ad=$(for s_pr in $1; do [ "${s_pr%%=*}" = "$s_u" ] && echo "${s_pr#*=}"; done)
		[ "$s_a" = - ] && s_a=""
		[ "$s_ls" = loaded ] || continue
		if [ "$s_ad" != - ]; then
			s_within "$s_a" "$s_ad" || { echo "$s_u: AllowedCPUs=$s_a, not within the administrator's $s_ad"; return 1; }
		else
			[ "$s_ct" = - ] || [ "$s_ct" = "${s_a:-$s_all}" ] || { echo "$s_u: AllowedCPUs=$s_a, schedpolicyctl says $s_ct"; return 1; }
		fi
		s_task_ok "$s_u" "$s_a" "$s_p" || return 1
	done </tmp/surface-snap
}
# s_task_ok UNIT CPUS [PID]: on v2 the unit's task (PID, or found) runs
# on CPUS (every CPU when empty); a unit without a task passes.
s_task_ok() {
	[ "$v2" = 1 ] || return 0
	s_tp=${3:-}
	[ -n "$s_tp" ] || s_tp=$(unit_pid "$1")
	[ "$s_tp" != - ] && [ -n "$s_tp" ] || return 0
	s_t=$(cpus_allowed "$s_tp")
	[ -z "$s_t" ] || [ "$s_t" = "${2:-$s_all}" ] || { echo "$1: AllowedCPUs=$2, its task $s_tp on $s_t"; return 1; }
}
# s_after_stop "UNIT=ADMIN ...": every unit has the administrator's value
# or nothing ("-"), its task runs on it (v2), every other loaded ss- unit
# has nothing, and state.json holds no value of ours.
s_after_stop() {
	for s_u in $(systemctl list-units --all --plain --no-legend 'ss-*.service' 'ss-*.scope' | awk '{ print $1 }'); do
		case " $1 " in *" $s_u="*) ;; *) set -- "$1 $s_u=-" ;; esac
	done
	s_snap noctl $(for s_pr in $1; do echo "${s_pr%%=*}"; done) >/tmp/surface-snap
	while read -r s_u s_a s_ls s_p s_ct; do
		s_ad=$(for s_pr in $1; do [ "${s_pr%%=*}" = "$s_u" ] && echo "${s_pr#*=}"; done)
		[ "$s_ad" = - ] && s_ad=""
		[ "$s_a" = - ] && s_a=""
		[ "$s_a" = "$s_ad" ] || { echo "$s_u: AllowedCPUs=$s_a after the stop, the administrator's is \"$s_ad\""; return 1; }
		s_task_ok "$s_u" "$s_a" "$s_p" || return 1
	done </tmp/surface-snap
	state_clean || { echo "state.json keeps values of ours: $(tr -d ' \n' <"$state")"; return 1; }
}
# s_stop NAME "UNIT=ADMIN ...": stop the daemon and check s_after_stop.
s_stop() {
	systemctl stop "$unit"
	check "surface-$1-stop"
	s_why=$(s_after_stop "$2") || fail_now "$s_why"
	pass "surface-$1-stop: after the daemon's stop every unit has its administrator's AllowedCPUs= or none ($2)$([ "$v2" = 1 ] && echo ", tasks on it")"
}
# s_show UNIT...: what each unit has, for a message (schedpolicyctl only
# while the daemon runs: it would start it by D-Bus activation).
s_show() {
	if unit_running; then s_snap "$@"; else s_snap noctl "$@"; fi | while read -r s_u s_a s_ls s_p s_ct; do
		echo "$s_u AllowedCPUs=$s_a ctl=$s_ct task $s_p on $(cpus_allowed "$s_p")"
	done
}

# surface_setup: what every scenario starts from, the daemon stopped
# with placement "systemd" for schedpolicyd.slice and debug logging (each
# write is a line), made from the guest's base configuration the first
# time (the start of surface_no_panic's journal, and the SKIP of the
# tasks' check on v1, once a run).
surface_setup() {
	once surface surface_begin
	cp /tmp/surface.conf "$conf"
	systemctl stop "$unit"
}
surface_begin() {
	cursor >"$st_dir/surface-c0"
	date +%s >"$st_dir/surface-t0"
	: >"$st_dir/surface-kills"
	cp "$base" "$conf"
	printf 'placement = "systemd"\nmanage = ["schedpolicyd.slice"]\n' >>"$conf"
	grep -q '^log_level' "$conf" || printf 'log_level = "debug"\n' >>"$conf"
	cp "$conf" /tmp/surface.conf
	note "surface: $([ "$v2" = 1 ] && echo "cgroup v2: AllowedCPUs= applied, tasks checked" || echo "cgroup v1: systemd stores AllowedCPUs= and applies nothing")"
	[ "$v2" = 1 ] || skip "surface-tasks" "cgroup v1: systemd applies no AllowedCPUs=, so the tasks' Cpus_allowed_list is not checked here (the VM checks it)"
}

# --- schedpolicyctl run --name X, twice ---------------------------------------
# The seams issue's own reproduction: under placement "systemd", a second
# run of a name whose scope is running is refused (FileExists, exit 5)
# and the daemon stays up; it once built that reply from the idle cgroupfs
# back end and died of a nil dereference on its loop.
testcase_surface_runtwice() {
	surface_setup
	s_start
	schedpolicyctl run --name ss-twice -- sleep 1000 </dev/null >/dev/null 2>&1 &
	rt_bg=$!
	trap 'kill "$rt_bg" 2>/dev/null; systemctl stop ss-twice.scope 2>/dev/null; wait "$rt_bg" 2>/dev/null; systemctl stop "$unit"' EXIT
	check surface-run-twice
	wait_until 30 systemctl is-active -q ss-twice.scope || fail_now "the first run --name ss-twice started no ss-twice.scope"
	run_twice ss-twice >/tmp/run-twice.why || fail_now "$(cat /tmp/run-twice.why)"
	pass "surface-run-twice: a second run --name ss-twice is refused (exit 5: $r2_out); the daemon (pid $r2_pid) stays up, no restart, no panic"
}

# --- set-property --runtime -----------------------------------------------
testcase_surface_setprop() {
	surface_setup
	s_start
	trap 'systemctl stop ss-rt1 ss-rt2 ss-rt3' EXIT
	for n in 1 2 3; do systemd-run --quiet --unit=ss-rt$n --slice=schedpolicyd.slice sleep 1000; done
	check surface-setprop
	wait_until 60 s_placed ss-rt1.service ss-rt2.service ss-rt3.service ||
		fail_now "units not placed: $(s_show ss-rt1.service ss-rt2.service ss-rt3.service)"
	p=$(sc ss-rt1.service)
	o=$(s_other "$p")
	c=$(cursor)
	# rt1 another CPU, rt2 the very CPU the daemon had set.
	systemctl set-property --runtime ss-rt1.service AllowedCPUs="$o"
	systemctl set-property --runtime ss-rt2.service AllowedCPUs="$p"
	set_policy performance
	exp="ss-rt1.service=$o ss-rt2.service=$p ss-rt3.service=-"
	check surface-setprop-runtime
	wait_until 30 s_unset ss-rt3.service && why=$(s_running "$exp") && [ "$(sc ss-rt1.service)" = "$o" ] && [ "$(sc ss-rt2.service)" = "$p" ] &&
		s_journal "$c" "AllowedCPUs was changed by someone else.*unit=ss-rt1.service" >/dev/null &&
		s_journal "$c" "AllowedCPUs was changed by someone else.*unit=ss-rt2.service" >/dev/null ||
		fail_now "${why:-} $(s_show ss-rt1.service ss-rt2.service ss-rt3.service; s_journal "$c" 'someone else')"
	pass "surface-setprop-runtime: set-property --runtime rt1=$o, rt2=$p (the value the daemon had set) kept across a switch to performance; the journal says so for both"
	set_policy powersaving
	s_need setprop 30 s_placed ss-rt3.service
	# kill -9, and the administrator sets rt3 to the daemon's value
	# while no daemon runs.
	p3=$(sc ss-rt3.service)
	s_kill9
	systemctl set-property --runtime ss-rt3.service AllowedCPUs="$p3"
	s_back
	set_policy performance
	exp="ss-rt1.service=$o ss-rt2.service=$p ss-rt3.service=$p3"
	check surface-setprop-kill-9
	wait_until 30 s_running "$exp" && [ "$(sc ss-rt3.service)" = "$p3" ] &&
		s_journal "$s_c9" "changed by someone else while the daemon did not follow the unit.*unit=ss-rt3.service" >/dev/null ||
		fail_now "$(s_running "$exp") $(s_show ss-rt3.service; s_journal "$s_c9" 'ss-rt3')"
	pass "surface-setprop-kill-9: rt3=$p3 set while the daemon was killed is the administrator's after the restart (journal), kept under performance"
	set_policy powersaving
	s_stop setprop "$exp"
	excerpt "surface: set-property --runtime (journal)" s_journal "$c" 'someone else\|recovered\|ss-rt'
}

# --- set-property (persistent) ---------------------------------------------
testcase_surface_persist() {
	surface_setup
	for n in 1 2; do
		printf '[Service]\nSlice=schedpolicyd.slice\nExecStart=/bin/sleep 1000\n' >/etc/systemd/system/ss-pf$n.service
	done
	trap 'systemctl stop ss-pf1 ss-pf2
		rm -rf /etc/systemd/system/ss-pf1.service /etc/systemd/system/ss-pf2.service /etc/systemd/system.control/ss-pf1.service.d /etc/systemd/system.control/ss-pf2.service.d
		systemctl daemon-reload' EXIT
	systemctl daemon-reload
	s_start
	systemctl start ss-pf1 ss-pf2
	check surface-persist
	wait_until 60 s_placed ss-pf1.service ss-pf2.service || fail_now "units not placed: $(s_show ss-pf1.service ss-pf2.service)"
	p=$(sc ss-pf1.service)
	o=$(s_other "$p")
	c=$(cursor)
	systemctl set-property ss-pf1.service AllowedCPUs="$o"
	systemctl set-property ss-pf2.service AllowedCPUs="$p"
	exp="ss-pf1.service=$o ss-pf2.service=$p"
	set_policy performance
	check surface-persist
	wait_until 30 s_running "$exp" && [ "$(sc ss-pf1.service)" = "$o" ] && [ "$(sc ss-pf2.service)" = "$p" ] &&
		[ -f /etc/systemd/system.control/ss-pf2.service.d/50-AllowedCPUs.conf ] &&
		s_journal "$c" "changed by someone else.*unit=ss-pf2.service" >/dev/null ||
		fail_now "$(s_running "$exp") $(s_show ss-pf1.service ss-pf2.service)"
	pass "surface-persist: set-property (in /etc/systemd/system.control) pf1=$o, pf2=$p (the daemon's value) kept under performance"
	# A daemon-reload with a kill -9 in its middle: the persistent
	# drop-ins are what the units have.
	s_arm
	systemctl daemon-reload &
	s_op=$!
	s_fire
	wait "$s_op"
	s_back
	set_policy powersaving
	check surface-persist-reload-kill-9
	wait_until 30 s_running "$exp" && [ "$(sc ss-pf2.service)" = "$p" ] ||
		fail_now "$(s_running "$exp")"
	pass "surface-persist-reload-kill-9: after daemon-reload and a kill -9, pf1=$(sc ss-pf1.service) within $o, pf2=$p, under powersaving"
	s_stop persist "$exp"
	systemctl daemon-reload
	check surface-persist-after-reload
	[ "$(sc ss-pf1.service)" = "$o" ] && [ "$(sc ss-pf2.service)" = "$p" ] ||
		fail_now "$(s_show ss-pf1.service ss-pf2.service)"
	pass "surface-persist-after-reload: a daemon-reload after the stop keeps pf1=$o pf2=$p"
}

# --- daemon-reload -----------------------------------------------------------
# s_writes CURSOR: the daemon's AllowedCPUs= writes since CURSOR.
s_writes() { s_count "$1" 'msg="AllowedCPUs set"'; }
testcase_surface_reload() {
	surface_setup
	printf '[Service]\nSlice=schedpolicyd.slice\nExecStart=/bin/sleep 1000\n' >/etc/systemd/system/ss-dr1.service
	trap 'systemctl stop ss-dr1 ss-dr2 ss-dr3 ss-dr4 ss-dr5 ss-dr6 ss-dr7 2>/dev/null; rm -f /etc/systemd/system/ss-dr1.service; systemctl daemon-reload' EXIT
	systemctl daemon-reload
	s_start
	o=$(s_other "$(s_cpus "$s_all" | head -n 1)")
	systemctl start ss-dr1
	systemd-run --quiet --unit=ss-dr2 --slice=schedpolicyd.slice sleep 1000
	systemd-run --quiet --unit=ss-dr3 --slice=schedpolicyd.slice sleep 1000
	systemd-run --quiet --unit=ss-dr4 --slice=schedpolicyd.slice -p AllowedCPUs="$o" sleep 1000
	units="ss-dr1.service ss-dr2.service ss-dr3.service ss-dr4.service"
	exp="ss-dr1.service=- ss-dr2.service=- ss-dr3.service=- ss-dr4.service=$o"
	s_need reload 60 s_placed ss-dr1.service ss-dr2.service ss-dr3.service
	before=$(for u in $units; do echo "$u=$(sc "$u")"; done)
	c=$(cursor)
	systemctl daemon-reload
	wait_until 60 s_seen "$c" 'the systemd manager reloaded'
	wait_until 30 s_running "$exp"
	after=$(for u in $units; do echo "$u=$(sc "$u")"; done)
	w=$(s_writes "$c") g=$(s_count "$c" 'msg="unit gone"')
	note "surface: daemon-reload with $(echo $units | wc -w) units placed: $w AllowedCPUs= writes, $g \"unit gone\""
	check surface-reload
	[ "$before" = "$after" ] && [ "$w" = 0 ] && [ "$g" = 0 ] && s_journal "$c" 'the systemd manager is reloading' >/dev/null &&
		s_journal "$c" 'the systemd manager reloaded: units listed again.*changed=false' >/dev/null ||
		fail_now "writes $w, unit gone $g; before: $(echo $before) after: $(echo $after); $(s_journal "$c" 'reload\|unit gone\|AllowedCPUs set' | tail -n 12)"
	pass "surface-reload: daemon-reload held the units and listed them once after (journal): values as before ($(echo $after)), 0 AllowedCPUs= writes, no unit forgotten"
	excerpt "surface: daemon-reload (journal)" s_journal "$c" 'reload\|unit gone\|adopted\|AllowedCPUs set'
	if [ "$v2" = 1 ]; then
		# Three busy units too (v2 measures their load): the machine
		# is overloaded and every unit runs unset (race to idle). Before
		# the hold, the plans over the units adopted one by one after a
		# reload packed and unset them in turn: 16 to 22 writes a reload
		# with three busy and three idle units in this VM.
		# Nice=19: busy to the daemon (their cpu.stat), yet systemd,
		# journald, the daemon and this script run first; at nice 0,
		# with the emulated CPUs themselves crowded on a busy host, the
		# daemon missed its 30 s watchdog and the run its time limit.
		# That priority also means the reload itself (seconds of
		# systemd's CPU time under emulation) takes CPU time from the busy
		# units: their load really drops while systemd reloads, and a
		# plan may follow it. What the hold promises is checked: no plan
		# over a partial set of units (every "placement changed" line
		# counts every workload), no unit forgotten, and once the load is
		# back every value as before.
		for n in 5 6 7; do systemd-run --quiet --unit=ss-dr$n --slice=schedpolicyd.slice -p Nice=19 sh -c 'while :; do :; done'; done
		busy="ss-dr5.service ss-dr6.service ss-dr7.service"
		sleep 20 # the load average of the busy units builds up
		bbefore=$(for u in $units $busy; do echo "$u=$(sc "$u")"; done)
		nman=$(schedpolicyctl workloads 2>/dev/null | tail -n +2 | wc -l) # the seven, and any other unit of the slice
		c=$(cursor)
		systemctl daemon-reload
		wait_until 90 s_seen "$c" 'the systemd manager reloaded'
		sleep 3 # the plans the reload's end causes come at once
		s_as_before() { [ "$(for u in $units $busy; do echo "$u=$(sc "$u")"; done)" = "$bbefore" ]; }
		settled=0
		wait_until 60 s_as_before && settled=1
		bafter=$(for u in $units $busy; do echo "$u=$(sc "$u")"; done)
		w=$(s_writes "$c") g=$(s_count "$c" 'msg="unit gone"')
		plans=$(s_count "$c" 'msg="placement changed"')
		partial=$(s_journal "$c" 'msg="placement changed"' | grep -vc "managed=$nman ")
		note "surface: daemon-reload with 3 busy units among 7: $w AllowedCPUs= writes in $plans plans ($partial not over all $nman workloads), $g \"unit gone\""
		check surface-reload-busy
		[ "$settled" = 1 ] && [ "$partial" = 0 ] && [ "$g" = 0 ] ||
			fail_now "values back as before: $settled, plans over a partial set $partial, unit gone $g, writes $w; before: $(echo $bbefore) after: $(echo $bafter); $(s_journal "$c" 'AllowedCPUs set\|placement changed\|policy changed\|unit gone\|reload' | tail -n 12)"
		pass "surface-reload-busy: with three busy units, a daemon-reload made no plan over a partial set and forgot no unit ($w AllowedCPUs= writes in $plans plans over all $nman workloads, following the load); values as before ($(echo $bafter))"
		systemctl stop $busy
		s_need reload 60 s_placed ss-dr1.service ss-dr2.service ss-dr3.service
	else
		skip surface-reload-busy "cgroup v1: the daemon reads no load of a unit here, so every unit is idle to it (the VM checks a reload with busy units)"
	fi
	before=$(for u in $units; do echo "$u=$(sc "$u")"; done)
	c=$(cursor)
	s_arm
	systemctl daemon-reload &
	s_op=$!
	s_fire
	wait "$s_op"
	s_back
	wait_until 30 s_running "$exp"
	after=$(for u in $units; do echo "$u=$(sc "$u")"; done)
	check surface-reload-kill-9
	[ "$before" = "$after" ] && why=$(s_running "$exp") ||
		fail_now "${why:-} before: $(echo $before) after: $(echo $after)"
	pass "surface-reload-kill-9: a kill -9 during a daemon-reload: the new daemon keeps every value ($(echo $after)), $(s_writes "$c") writes"
	s_stop reload "$exp"
}

# --- daemon-reexec -----------------------------------------------------------
testcase_surface_reexec() {
	surface_setup
	# logind subscribes to the manager too, and systemd sends its unit
	# signals to every subscriber once one is subscribed: with logind
	# stopped the daemon is the only subscriber (checked at the end).
	trap 'systemctl stop ss-rx1 ss-rx2 ss-rxt.service ss-rxt.timer ss-rxn.service ss-rxn.timer 2>/dev/null
		systemctl unmask --runtime --quiet systemd-logind.service
		systemctl start systemd-logind.service' EXIT
	systemctl mask --runtime --quiet systemd-logind.service
	systemctl stop systemd-logind.service
	s_start
	o=$(s_other "$(s_cpus "$s_all" | head -n 1)")
	systemd-run --quiet --unit=ss-rx1 --slice=schedpolicyd.slice sleep 1000
	systemd-run --quiet --unit=ss-rx2 --slice=schedpolicyd.slice -p AllowedCPUs="$o" sleep 1000
	s_need reexec 60 s_placed ss-rx1.service
	was=$(busctl status org.freedesktop.systemd1 | sed -n 's/^UniqueName=//p')
	c=$(cursor)
	systemctl daemon-reexec
	s_now=$(busctl status org.freedesktop.systemd1 | sed -n 's/^UniqueName=//p')
	wait_until 60 s_seen "$c" 'the systemd manager reloaded'
	exp="ss-rx1.service=- ss-rx2.service=$o ss-rxt.service=-"
	g=$(s_count "$c" 'msg="unit gone"')
	check surface-reexec
	[ "$was" != "$s_now" ] && [ "$g" = 0 ] && s_placed ss-rx1.service && [ -n "$(ucpus ss-rx2.service)" ] &&
		s_journal "$c" 'the systemd manager reloaded: units listed again' >/dev/null ||
		fail_now "bus name $was -> $s_now, unit gone $g; $(s_show ss-rx1.service ss-rx2.service; s_journal "$c" 'reload\|unit gone\|adopted' | tail -n 8)"
	pass "surface-reexec: systemd re-executed (bus name $was -> $s_now); the daemon held its units and listed them again, none forgotten"
	# A unit its timer starts: no client of the manager's waits for its
	# start job, so only a subscriber hears of it (JobRemoved).
	systemd-run --quiet --on-active=2 --unit=ss-rxt --slice=schedpolicyd.slice sleep 1000
	check surface-reexec-signals
	wait_until 60 sh -c "systemctl is-active -q ss-rxt.service" && wait_until 30 s_placed ss-rxt.service &&
		s_journal "$c" 'adopted unit.*unit=ss-rxt.service' >/dev/null ||
		fail_now "$(s_show ss-rxt.service; s_journal "$c" 'ss-rxt')"
	pass "surface-reexec-signals: ss-rxt.service, started by a timer after the re-execution, adopted and placed (AllowedCPUs=$(sc ss-rxt.service)): UnitNew/JobRemoved still arrive"
	set_policy performance
	check surface-reexec-switch
	wait_until 30 s_unset ss-rx1.service ss-rxt.service && why=$(s_running "$exp") ||
		fail_now "${why:-} $(s_show ss-rx1.service ss-rxt.service)"
	pass "surface-reexec-switch: a switch after the re-execution still places the units it had (rx1 and rxt unset under performance, rx2 $o)"
	set_policy powersaving
	s_need reexec 30 s_placed ss-rx1.service ss-rxt.service
	s_arm
	systemctl daemon-reexec &
	s_op=$!
	s_fire
	wait "$s_op"
	s_back
	set_policy performance
	check surface-reexec-kill-9
	wait_until 30 s_unset ss-rx1.service ss-rxt.service && why=$(s_running "$exp") ||
		fail_now "${why:-} $(s_show ss-rx1.service ss-rxt.service)"
	pass "surface-reexec-kill-9: a kill -9 during a re-execution: the new daemon recovers and places the units (performance: rx1 and rxt unset, rx2 $o)"
	set_policy powersaving
	s_need reexec 30 s_placed ss-rx1.service
	s_stop reexec "$exp"
	excerpt "surface: daemon-reexec (journal)" s_journal "$c" 'reload\|unit gone\|adopted\|recovered\|ss-rxt'
	# The negative control: with the daemon stopped and logind masked,
	# nobody is subscribed, and systemd sends no UnitNew for a unit a
	# timer starts: what the daemon saw came through its own
	# subscription, kept across the re-execution.
	dbus-monitor --system "type='signal',sender='org.freedesktop.systemd1'" </dev/null >/tmp/surface-monitor.log 2>&1 &
	mon=$!
	wait_until 10 grep -q NameAcquired /tmp/surface-monitor.log
	systemd-run --quiet --on-active=2 --unit=ss-rxn --slice=schedpolicyd.slice sleep 1000
	wait_until 60 sh -c "systemctl is-active -q ss-rxn.service"
	sleep 1
	kill "$mon"
	wait "$mon" 2>/dev/null
	check surface-reexec-subscribed
	systemctl is-active -q ss-rxn.service && ! grep -q 'ss-rxn\|ss_2drxn' /tmp/surface-monitor.log ||
		fail_now "ss-rxn $(systemctl is-active ss-rxn.service); dbus-monitor: $(grep -c 'ss-rxn\|ss_2drxn' /tmp/surface-monitor.log) lines name it"
	pass "surface-reexec-subscribed: with no subscriber systemd sends no signal for a unit its timer starts (ss-rxn.service, unseen by dbus-monitor): the daemon's own Subscribe survived the re-execution"
}

# --- restarting --------------------------------------------------------------
testcase_surface_restart() {
	surface_setup
	printf '[Service]\nSlice=schedpolicyd.slice\nExecStart=/bin/sleep 1000\n' >/etc/systemd/system/ss-rs1.service
	trap 'systemctl stop ss-rs1 ss-rs2; rm -f /etc/systemd/system/ss-rs1.service; systemctl daemon-reload' EXIT
	systemctl daemon-reload
	s_start
	systemctl start ss-rs1
	systemd-run --quiet --unit=ss-rs2 --slice=schedpolicyd.slice -p Restart=on-failure -p RestartSec=1 sh -c 'sleep 2; exit 3'
	exp="ss-rs1.service=- ss-rs2.service=-"
	s_need restart 60 s_placed ss-rs1.service ss-rs2.service
	p=$(sc ss-rs1.service)
	pid=$(unit_pid ss-rs1.service)
	c=$(cursor)
	systemctl restart ss-rs1
	n0=$(systemctl show -p NRestarts --value ss-rs2.service)
	wait_until 60 sh -c "[ \$(systemctl show -p NRestarts --value ss-rs2.service) -ge $((n0 + 2)) ] && systemctl is-active -q ss-rs2.service"
	check surface-restart
	[ "$(unit_pid ss-rs1.service)" != "$pid" ] && [ "$(sc ss-rs1.service)" = "$p" ] && why=$(s_running "$exp") && s_placed ss-rs1.service ss-rs2.service ||
		fail_now "${why:-} $(s_show ss-rs1.service ss-rs2.service)"
	pass "surface-restart: systemctl restart keeps rs1's AllowedCPUs=$p (new task $(unit_pid ss-rs1.service)$([ "$v2" = 1 ] && echo " on $(cpus_allowed "$(unit_pid ss-rs1.service)")")); rs2 restarted by Restart=on-failure $(systemctl show -p NRestarts --value ss-rs2.service) times keeps $(sc ss-rs2.service)"
	s_arm
	systemctl restart ss-rs1 &
	s_op=$!
	s_fire
	wait "$s_op"
	s_back
	set_policy performance
	check surface-restart-kill-9
	wait_until 30 s_unset ss-rs1.service ss-rs2.service && why=$(s_running "$exp") ||
		fail_now "${why:-} $(s_show ss-rs1.service ss-rs2.service)"
	pass "surface-restart-kill-9: a kill -9 during a restart: the new daemon recovers both (performance: unset)"
	set_policy powersaving
	s_need restart 30 s_placed ss-rs1.service
	s_stop restart "$exp"
}

# --- failing -------------------------------------------------------------------
testcase_surface_fail() {
	surface_setup
	trap 'systemctl stop ss-fl1 ss-fl2 2>/dev/null; systemctl reset-failed ss-fl1.service ss-fl2.service 2>/dev/null
		rm -f /etc/systemd/system/ss-fl1.service /run/ss-fl1.fifo /run/ss-fl2.fifo
		systemctl daemon-reload' EXIT
	# Both fail once their FIFO is written: idle until then (a polling
	# loop's sleeps are load enough under the VM's emulation to make the
	# plan race to idle).
	rm -f /run/ss-fl1.fifo /run/ss-fl2.fifo
	mkfifo /run/ss-fl1.fifo /run/ss-fl2.fifo
	printf '[Service]\nSlice=schedpolicyd.slice\nExecStart=/bin/sh -c "read x </run/ss-fl1.fifo; exit 3"\n' >/etc/systemd/system/ss-fl1.service
	systemctl daemon-reload
	s_start
	systemctl start ss-fl1
	systemd-run --quiet --unit=ss-fl2 --slice=schedpolicyd.slice sh -c 'read x </run/ss-fl2.fifo; exit 3'
	exp="ss-fl1.service=- ss-fl2.service=-"
	s_need fail 60 s_placed ss-fl1.service ss-fl2.service
	c=$(cursor)
	echo x >/run/ss-fl1.fifo
	echo x >/run/ss-fl2.fifo
	s_kill9
	s_back
	check surface-fail
	wait_until 60 sh -c '[ "$(systemctl show -p ActiveState --value ss-fl1.service)" = failed ] && [ "$(systemctl show -p ActiveState --value ss-fl2.service)" = failed ]' &&
		[ -n "$(sc ss-fl1.service)" ] && [ -n "$(sc ss-fl2.service)" ] ||
		fail_now "$(systemctl show -p ActiveState ss-fl1.service ss-fl2.service | tr '\n' ' ') $(s_show ss-fl1.service ss-fl2.service)"
	pass "surface-fail: both units failed (a kill -9 of the daemon meanwhile) keeping the daemon's AllowedCPUs= fl1=$(sc ss-fl1.service) fl2=$(sc ss-fl2.service)"
	s_stop fail "$exp"
}

# --- removed and created again ------------------------------------------------
s_unitfile() { printf '[Service]\nSlice=schedpolicyd.slice\nExecStart=/bin/sleep 1000\n' >/etc/systemd/system/$1.service; }
testcase_surface_recreate() {
	surface_setup
	trap 'systemctl stop ss-rc1 ss-rc2 2>/dev/null; rm -f /etc/systemd/system/ss-rc1.service; systemctl daemon-reload' EXIT
	s_unitfile ss-rc1
	systemctl daemon-reload
	s_start
	systemctl start ss-rc1
	systemd-run --quiet --unit=ss-rc2 --slice=schedpolicyd.slice sleep 1000
	s_need recreate 60 s_placed ss-rc1.service ss-rc2.service
	p=$(sc ss-rc1.service)
	c=$(cursor)
	# The administrator's way: stop, remove, reload. The runtime drop-in
	# with the daemon's value stays in /run/systemd/system.control; a kill
	# -9 meanwhile, then the unit file created again.
	systemctl stop ss-rc1 ss-rc2
	rm /etc/systemd/system/ss-rc1.service
	systemctl daemon-reload
	wait_until 30 sh -c "[ \"\$(systemctl show -p LoadState --value ss-rc2.service)\" = not-found ]"
	s_kill9
	s_back
	s_unitfile ss-rc1
	systemctl daemon-reload
	systemctl start ss-rc1
	systemd-run --quiet --unit=ss-rc2 --slice=schedpolicyd.slice sleep 1000
	check surface-recreate
	wait_until 30 s_placed ss-rc1.service ss-rc2.service && s_journal "$c" 'original AllowedCPUs recovered from saved state.*unit=ss-rc1.service' >/dev/null &&
		s_journal "$s_c9" 'adopted unit.*original= .*unit=ss-rc2.service' >/dev/null ||
		fail_now "$(s_show ss-rc1.service ss-rc2.service; s_journal "$c" 'ss-rc' | tail -n 8)"
	pass "surface-recreate: rc1 created again after a kill -9 starts with the daemon's $p from its runtime drop-in, known as the daemon's (journal); the transient rc2 started again with none"
	# Removed while the daemon stops: it says the value stays and keeps
	# the record; the next start resets it once the unit is back.
	systemctl stop ss-rc1
	rm /etc/systemd/system/ss-rc1.service
	systemctl daemon-reload
	c=$(cursor)
	systemctl stop "$unit"
	s_unitfile ss-rc1
	systemctl daemon-reload
	check surface-recreate-stopped
	s_journal "$c" 'the unit is gone but the AllowedCPUs= the daemon set stays in its runtime drop-in.*unit=ss-rc1.service' >/dev/null && grep -q '"unit": "ss-rc1.service"' "$state" ||
		fail_now "$(s_journal "$c" 'ss-rc1'; cat "$state")"
	pass "surface-recreate-stopped: removed with the daemon stopping, rc1's value is said to stay in its drop-in ($(sc ss-rc1.service)); state.json keeps its record"
	s_start
	systemctl start ss-rc1
	set_policy performance
	exp="ss-rc1.service=- ss-rc2.service=-"
	check surface-recreate-reset
	wait_until 30 s_unset ss-rc1.service ss-rc2.service && why=$(s_running "$exp") ||
		fail_now "${why:-} $(s_show ss-rc1.service)"
	pass "surface-recreate-reset: the next start knows rc1's value as the daemon's: unset under performance"
	set_policy powersaving
	s_need recreate 30 s_placed ss-rc1.service
	s_stop recreate "$exp"
}

# --- 300 transient services in a burst -------------------------------------------
testcase_surface_burst() {
	surface_setup
	trap "systemctl stop 'ss-bl*.service' 'ss-b[0-9]*.service' 2>/dev/null" EXIT
	cat >/tmp/surface-burst.py <<'PY'
# StartTransientUnit for PREFIX1..PREFIXN.service in schedpolicyd.slice,
# each running sleep SECONDS; prints the seconds it took.
import sys, time
from gi.repository import Gio, GLib
prefix, first, last, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
t0 = time.monotonic()
for i in range(first, last + 1):
    props = [("Description", GLib.Variant("s", "surface burst %d" % i)),
             ("Slice", GLib.Variant("s", "schedpolicyd.slice")),
             ("ExecStart", GLib.Variant("a(sasb)", [("/bin/sleep", ["/bin/sleep", secs], False)]))]
    bus.call_sync("org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
                  "StartTransientUnit", GLib.Variant("(ssa(sv)a(sa(sv)))", ("%s%d.service" % (prefix, i), "fail", props, [])),
                  None, Gio.DBusCallFlags.NONE, -1, None)
print("%.1f" % (time.monotonic() - t0))
PY
	s_start
	# 20 stay (sleep 1000), 280 leave after 10 s; a kill -9 after the
	# first 150.
	c=$(cursor)
	t0=$(date +%s)
	a=$(python3 /tmp/surface-burst.py ss-bl 1 20 1000)
	b=$(python3 /tmp/surface-burst.py ss-b 21 150 10)
	s_kill9
	d=$(python3 /tmp/surface-burst.py ss-b 151 300 10)
	s_back
	t1=$(date +%s)
	gone() { [ "$(systemctl list-units --all --plain --no-legend 'ss-b[0-9]*.service' | wc -l)" = 0 ]; }
	wait_until 300 gone
	t2=$(date +%s)
	listed() { [ "$(schedpolicyctl workloads | grep -c '^ss-b[0-9]')" = 0 ] && [ "$(schedpolicyctl workloads | grep -c '^ss-bl')" = 20 ]; }
	wait_until 120 listed
	t3=$(date +%s)
	long=$(i=1; while [ $i -le 20 ]; do echo ss-bl$i.service; i=$((i + 1)); done)
	exp=$(for u in $long; do printf '%s=- ' "$u"; done)
	ad=$(s_count "$c" 'adopted unit.*unit=ss-b[0-9]')
	go=$(s_count "$c" 'unit gone.*unit=ss-b[0-9]')
	note "surface: burst of 300 transient services: started in ${a}+${b}+${d} s (python, StartTransientUnit), all started ${t1} - ${t0} = $((t1 - t0)) s after the first; the 280 short ones gone $((t2 - t0)) s after it, the daemon's list without them $((t3 - t0)) s after it; $ad adoptions and $go \"unit gone\" of the short ones in the journal"
	check surface-burst
	listed && wait_until 60 s_placed $long && why=$(s_running "$exp") && ! grep -q '"unit": "ss-b[0-9]' "$state" && [ "$ad" -gt 0 ] && [ "$go" -gt 0 ] ||
		fail_now "${why:-} workloads: $(schedpolicyctl workloads | grep -c '^ss-b') listed; records: $(grep -c '"unit": "ss-b' "$state")"
	pass "surface-burst: 300 transient services in a burst with a kill -9 in it: the 280 that left are no workloads and have no record in state.json, the 20 that stay are placed"
	s_stop burst "$exp"
}

# --- a user logging out and in ------------------------------------------------------
testcase_surface_users() {
	surface_setup
	user_linger 60
	sed -i 's/^manage = .*/manage = ["schedpolicyd.slice", "app.slice", "background.slice"]/' "$conf"
	if [ "$v2" = 1 ]; then
		# cpuset delegated (docs/USERS.md): the user's own units are
		# placed through the user's manager.
		trap 'ur systemctl --user stop ss-app.service ss-app2.service 2>/dev/null; user_delegate default; cp /tmp/surface.conf "$conf"' EXIT
		user_delegate on
		apps="ss-app.service"
		placed_u() { for n in $apps; do [ -n "$(usc "$n")" ] && [ -n "$(ucpus "$n")" ] || return 1; done; }
		unset_u() { for n in $apps; do [ -z "$(usc "$n")" ] || return 1; done; }
		# In background.slice: an app.slice unit of a desktop that writes
		# no focus attribute (none does here) is app-nofocus, never
		# confined.
		startu() { ur systemd-run --user --quiet --unit="${1:-ss-app}" --slice=background.slice sleep 1000; }
		shown() { for n in $apps; do printf '%s=%s ' "$n" "$(usc "$n")"; done; }
		what="ss-app.service in the user's background.slice, placed through the user's manager"
	else
		# cgroup v1: the user's manager is one unit of class user, never
		# confined (it holds the session and the focused app): "placed"
		# is listed as that workload with no AllowedCPUs= under
		# powersaving.
		trap 'cp /tmp/surface.conf "$conf"' EXIT
		placed_u() { [ "$(wl_class "$um")" = user ] && [ -z "$(sc "$um")" ]; }
		unset_u() { [ -z "$(sc "$um")" ]; }
		startu() { :; }
		shown() { echo "$um class=$(wl_class "$um") AllowedCPUs=$(sc "$um")"; }
		what="$um, a workload of class user, never confined (cgroup v1: no cpuset to delegate)"
	fi
	s_start
	startu
	check surface-users
	wait_until 60 placed_u || fail_now "$what not placed: $(schedpolicyctl workloads)"
	p=$(shown)
	c=$(cursor)
	loginctl disable-linger sptest
	wait_until 60 sh -c "! systemctl is-active -q $um"
	# logind says the user is gone after the manager stopped: the
	# daemon must have heard it before it is killed.
	wait_until 60 s_seen "$c" 'msg="user logged out"'
	s_kill9
	s_back
	user_linger 60
	startu
	check surface-users
	wait_until 60 placed_u && s_journal "$c" 'user logged out' >/dev/null && s_journal "$s_c9" 'user logged in\|following users' >/dev/null ||
		fail_now "$(schedpolicyctl workloads; s_journal "$c" 'user\|unit gone\|adopted' | tail -n 8)"
	pass "surface-users: $what ($p); the user logged out, a kill -9, logged in again: placed again ($(shown))"
	if [ "$v2" = 1 ]; then
		# The user's manager re-executes (Debian's systemd upgrade
		# does it for every user): it closes the daemon's connection.
		c=$(cursor)
		ur systemctl --user daemon-reexec
		apps="ss-app.service ss-app2.service"
		startu ss-app2
		check surface-users-reexec
		wait_until 60 placed_u && s_journal "$c" "the user's manager closed the connection" >/dev/null &&
			s_journal "$c" "managing a user's units through its manager" >/dev/null ||
			fail_now "$(shown; schedpolicyctl workloads; s_journal "$c" 'user' | tail -n 6)"
		pass "surface-users-reexec: the user's manager re-executed; the daemon connected again and placed ss-app2.service started after it ($(shown))"
	else
		skip surface-users-reexec "cgroup v1: the user's manager is placed as a whole through the system manager; no connection to it to lose"
	fi
	set_policy performance
	check surface-users-switch
	wait_until 30 unset_u || fail_now "$(shown)"
	pass "surface-users-switch: after logging in again the daemon places what is there: unset under performance ($(shown))"
	set_policy powersaving
	s_need users 30 placed_u
	if [ "$v2" = 1 ]; then
		systemctl stop "$unit"
		why=""
		for n in $apps; do
			ua=$(usc "$n")
			ut=$(cpus_allowed "$(ur systemctl --user show -p MainPID --value "$n")")
			[ -z "$ua" ] && [ "$ut" = "$s_all" ] || why="$why $n: AllowedCPUs=$ua task on $ut;"
		done
		state_clean || why="$why state.json: $(tr -d ' \n' <"$state")"
		check surface-users-stop
		assert_eq "$why" ""
		pass "surface-users-stop: after the stop $apps have no AllowedCPUs=, their tasks on $s_all"
	else
		s_stop users "$um=-"
	fi
}

# surface_no_panic: no panic in the daemon's journal since the first
# scenario; every restart was a kill of ours; the configuration back to
# the guest's base.
testcase_surface_no_panic() {
	once surface surface_begin
	s_c0=$(cat "$st_dir/surface-c0") s_kills=$(grep -c . "$st_dir/surface-kills")
	restarts=$(journal_since "$s_c0" -u "$unit" | grep -c "schedpolicyd.service: Failed with result")
	signal=$(journal_since "$s_c0" -u "$unit" | grep -c "schedpolicyd.service: Failed with result 'signal'")
	panics=$(s_count "$s_c0" 'panic:\|fatal error:\|goroutine [0-9]* \[')
	cp "$base" "$conf"
	check surface-no-panic
	[ "$panics" = 0 ] && [ "$restarts" = "$s_kills" ] && [ "$signal" = "$s_kills" ] ||
		fail_now "$panics panic lines, $restarts failures ($signal by a signal) for $s_kills kills: $(s_journal "$s_c0" 'panic:\|fatal error:' | head -n 5; journal_since "$s_c0" -u "$unit" | grep 'Failed with result' | head -n 5)"
	pass "surface-no-panic: no panic in the daemon's journal; it failed $restarts times, each one of our $s_kills kill -9s"
	note "surface: took $(($(date +%s) - $(cat "$st_dir/surface-t0"))) s"
}
