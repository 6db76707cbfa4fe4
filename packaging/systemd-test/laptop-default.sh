# laptop-default.sh — issue 34, item 1, end to end in the cgroup v2 VM: the
# .deb installed and its configuration NOT edited, a user logged in
# through logind (linger) with GNOME-shaped units, the test battery
# (testpower.ko) unplugged and plugged in, a focus switch, the stop. In the
# style of the harness branch: testcase_* functions run by lib.sh's
# run_testcases, fail-fast assert_* helpers; the helpers lib.sh lacks are
# defined here with the prefix ld_. Sourced after lib.sh (and battery.sh:
# nothing of it is used, but b_* names are left alone) by vm-guest.sh,
# which sets base, the package's configuration saved by testcase_install.
#
#   laptop_default_dropin     the package's user@.service drop-in is
#                             installed and user@.service delegates cpuset;
#                             the install restarted no user's manager
#   laptop_default_whole      the drop-in masked (an administrator's undo)
#                             and the user's manager started again: cpuset
#                             not delegated; the daemon places
#                             user@UID.service as one unit of class user,
#                             never confined on battery, says so once, and
#                             probe says why and that it comes at the next
#                             login
#   laptop_default_units      unmasked, the user logs in again (linger off
#                             and on): cpuset delegated; GNOME-shaped units:
#                             a busy focused app-gnome-*.scope, an unfocused
#                             light one, a background.slice indexer, two
#                             session.slice stand-ins (the shell,
#                             pipewire), a busy system.slice service; before
#                             any focus attribute every app is app-nofocus
#                             and probe says the desktop writes none; then
#                             the attributes as Mutter writes them
#   laptop_default_battery    on AC (performance) nothing is confined;
#                             unplugged (powersaving): the background,
#                             system and unfocused units on the efficient
#                             CPUs (the most efficient class where the VM
#                             has several, else fewer CPUs than all), the
#                             focused and session units unconfined, each
#                             unit's tasks' Cpus_allowed_list as planned; a
#                             focus switch moves the two apps within a
#                             second; plugged in: everything unconfined
#   laptop_default_stop       systemctl stop: every unit's AllowedCPUs=
#                             back to what it was (none), tasks on every
#                             CPU, state.json holds no value of ours
#   laptop_default_purged     after the harness's testcase_purge: the
#                             drop-in gone with the package, no unit of the
#                             user or the system holds an AllowedCPUs= of
#                             ours (the runtime reset values systemd keeps
#                             until reboot are empty)
#
# Each step prints what every unit got and how long the step took (from
# the write to testpower's parameter, or the focus write, to the state
# asserted), for the issue's transcript.

ld_dropin=50-schedpolicyd-delegate-cpuset.conf
ld_lib=/lib/systemd/system/user@.service.d/$ld_dropin
ld_mask=/etc/systemd/system/user@.service.d/$ld_dropin
ld_par=/sys/module/testpower/parameters
ld_ff=app-gnome-firefox-1111.scope
ld_ed=app-gnome-gedit-2222.scope
ld_idx=tracker-miner-fs-3.service
ld_shell=org.gnome.Shell-sptest.service
ld_pw=pipewire-sptest.service
ld_sys=sp-sysbusy.service
ld_apps="$ld_ff $ld_ed"
ld_uunits="$ld_ff $ld_ed $ld_idx $ld_shell $ld_pw"

# ld_now_ms: the guest's monotonic-enough wall clock, ms (the steps'
# durations; never a bound of a unit test: this is the VM's transcript).
# From /proc/uptime with the shell's read: no process started, so the
# measure is not the emulated VM's fork and exec.
ld_now_ms() {
	read -r ld_up _ </proc/uptime
	ld_cs=${ld_up#*.}
	ld_cs=${ld_cs#0} # POSIX sh: no 10#; "07" is octal to $(( ))
	echo $((${ld_up%.*} * 1000 + ld_cs * 10))
}
# ld_wait SECONDS CMD...: CMD until it succeeds, for at most SECONDS of
# the guest's time (lib.sh's wait_until counts tries, and a try of the
# placement checks here takes seconds under emulation).
ld_wait() {
	lw_end=$(($(ld_now_ms) + $1 * 1000))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ "$(ld_now_ms)" -lt "$lw_end" ] || return 1
		sleep 0.2
	done
}
# ld_cg_cpus UNIT: the user's unit's cgroup cpuset.cpus (what systemd
# wrote for its AllowedCPUs=), read by the shell alone.
ld_cg_cpus() {
	ld_v=
	read -r ld_v <"$(ld_ucg "$1")/cpuset.cpus" 2>/dev/null
	echo "$ld_v"
}

# ld_ucg UNIT: the user's unit's cgroup directory (its slice from its name).
ld_ucg() {
	case $1 in
	app-*) echo "$ucg/app.slice/$1" ;;
	"$ld_idx") echo "$ucg/background.slice/$1" ;;
	*) echo "$ucg/session.slice/$1" ;;
	esac
}
# ld_upid UNIT: the first task of the user's unit.
ld_upid() { head -n 1 "$(ld_ucg "$1")/cgroup.procs" 2>/dev/null; }
# ld_focus APP VALUE [APP VALUE]: the user writes user.xdg.inactive-since
# as Mutter does (two apps: one after the other, in one process).
ld_focus() {
	ur python3 -c 'import os, sys
a = sys.argv[1:]
for i in range(0, len(a), 2): os.setxattr(a[i], "user.xdg.inactive-since", a[i + 1].encode())' "$(ld_ucg "$1")" "$2" ${3:+"$(ld_ucg "$3")" "$4"}
}
# ld_efficient: the most efficient class's cpulist from probe when the VM
# has more than one class, else nothing (one class: "packed" means fewer
# CPUs than all).
ld_efficient() {
	schedpolicyd probe --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin).get("cpu_classes") or []
print(c[0]["cpus"] if len(c) > 1 else "")'
}
# ld_subset A B: cpulist A names only CPUs of cpulist B.
ld_subset() {
	python3 - "$1" "$2" <<-'PY'
	import sys
	def cpus(s):
	    out = set()
	    for p in filter(None, s.split(",")):
	        a, _, b = p.partition("-")
	        out.update(range(int(a), int(b or a) + 1))
	    return out
	sys.exit(0 if cpus(sys.argv[1]) and cpus(sys.argv[1]) <= cpus(sys.argv[2]) else 1)
	PY
}
# ld_packed LIST: LIST is a set of ours on the efficient CPUs: within the
# most efficient class, or (one class) fewer CPUs than all.
ld_packed() {
	[ -n "$1" ] || return 1
	if [ -n "$ld_eff" ]; then
		ld_subset "$1" "$ld_eff"
	else
		[ "$(cpulist_count "$1")" -lt "$(cpulist_count "$all")" ]
	fi
}
# ld_show: every unit's AllowedCPUs=, class, and its task's
# Cpus_allowed_list, one line each.
ld_show() {
	for n in $ld_uunits; do echo "user $n class=$(wl_class "$n") AllowedCPUs=$(usc "$n") task=$(cpus_allowed "$(ld_upid "$n")")"; done
	echo "system $ld_sys class=$(wl_class "$ld_sys") AllowedCPUs=$(sc "$ld_sys") task=$(cpus_allowed "$(unit_pid "$ld_sys")")"
	echo "system $um class=$(wl_class "$um") AllowedCPUs=$(sc "$um")"
}
# ld_tasks_ok: every unit's tasks may use what its AllowedCPUs= says
# (lib.sh's placed_ok, for the user's units and the system one).
ld_tasks_ok() { placed_ok usc ld_upid ld_ucg "$ld_uunits" && units_ok "$ld_sys"; }
# ld_unconfined: no unit holds an AllowedCPUs=, and their tasks run on
# every CPU.
ld_unconfined() {
	for n in $ld_uunits; do [ -z "$(usc "$n")" ] || return 1; done
	[ -z "$(sc "$ld_sys")" ] && ld_tasks_ok >/dev/null
}
# ld_battery_placed: the background, system and unfocused units packed
# on the efficient CPUs, the focused app and the session unconfined.
# FOCUSED and UNFOCUSED name the two apps.
ld_battery_placed() {
	ld_packed "$(usc "$ld_idx")" && ld_packed "$(sc "$ld_sys")" && ld_packed "$(usc "$2")" &&
		[ -z "$(usc "$1")" ] && [ -z "$(usc "$ld_shell")" ] && [ -z "$(usc "$ld_pw")" ] &&
		[ "$(wl_class "$1")" = focused ] && [ "$(wl_class "$2")" = app ] && ld_tasks_ok >/dev/null
}
# ld_fresh_login: the user's manager starts anew (as at a login), through
# logind: linger off, the manager gone, linger on.
ld_fresh_login() {
	user_setup
	loginctl disable-linger sptest 2>/dev/null
	wait_until 30 sh -c "[ \"\$(systemctl is-active $um)\" != active ]"
	user_linger 60
	# The socket may be the old manager's, not yet removed: wait for the
	# new manager and its cgroup.
	wait_until 60 sh -c "systemctl is-active --quiet $um && test -e $ucg/cgroup.controllers"
}
# ld_start_units: the GNOME-shaped units, as the user and the system.
ld_start_units() {
	# Busy but light, in one process with one thread: 20 ms of work
	# every 200 ms, about 0.1 of a CPU. Not a shell loop: its sleep is a
	# fork and exec each round, slow under emulation (TCG), and a sample
	# that caught the shell and its child runnable together on the one
	# CPU they were packed on confirmed the unit crowded and spread
	# everything ("crowded unit confirmed"); with 300 rounds and a 50 ms
	# sleep the shell loops also kept firefox at 0.45 of a CPU and the
	# service at 0.33, at the powersaving plan's threshold (one class:
	# the background's plan counts the foreground's load).
	busy=$(printf '%s\n' 'import time' 'while True:' '    t = time.monotonic()' '    while time.monotonic() - t < 0.02: pass' '    time.sleep(0.2)')
	ur systemd-run --user --quiet --scope --slice=app.slice --unit="${ld_ff%.scope}" python3 -c "$busy" </dev/null >/dev/null 2>&1 &
	ur systemd-run --user --quiet --scope --slice=app.slice --unit="${ld_ed%.scope}" sleep 100000 </dev/null >/dev/null 2>&1 &
	ur systemd-run --user --quiet --slice=background.slice --unit="$ld_idx" sleep 100000
	ur systemd-run --user --quiet --slice=session.slice --unit="$ld_shell" sleep 100000
	ur systemd-run --user --quiet --slice=session.slice --unit="$ld_pw" sleep 100000
	systemctl is-active --quiet "$ld_sys" || systemd-run --quiet --unit="$ld_sys" --slice=system.slice python3 -c "$busy"
}
# ld_diag CURSOR: what failed a step: every unit, the policy, the
# workloads' loads and the daemon's placement lines since CURSOR.
ld_diag() { ld_show | tr '\n' ';'; schedpolicyctl status 2>&1 | grep -E '^(policy|reason|power)' | tr '\n' ';'; schedpolicyctl workloads 2>&1 | awk '{ print $1, $2, $3, $4, $5 }' | tr '\n' ';'; journal_since "$1" -u "$unit" | grep -E 'placement|plan|race|spread' | tail -n 15 | tr '\n' ';'; }
# ld_power on|off: the test battery's mains adapter.
ld_power() { echo "$1" >"$ld_par/ac_online"; }
ld_policy() { schedpolicyctl status --json 2>/dev/null | sed -n 's/^  "active_policy": "\(.*\)",$/\1/p'; }
ld_is_policy() { [ "$(ld_policy)" = "$1" ]; }

# ld_up: the daemon runs from the package's configuration as installed
# (no edit), on the test battery (on AC), with no explicit choice saved.
ld_up() {
	if ! lsmod | grep -q '^testpower '; then
		modprobe testpower 2>/tmp/ld-modprobe.err || fail_now "modprobe testpower: $(cat /tmp/ld-modprobe.err)"
	fi
	ld_power on
	if ! cmp -s "$base" "$conf" || ! unit_running; then
		systemctl stop "$unit"
		cp "$base" "$conf"
		rm -f "$state"
		systemctl start "$unit"
	fi
	wait_until 30 unit_running || fail_now "$unit is $(systemctl is-active "$unit")"
	# No explicit choice in force: an earlier testcase's `schedpolicyctl
	# set` is saved for good (the knob as configured only after a reset).
	schedpolicyctl reset >/dev/null 2>&1 || fail_now "schedpolicyctl reset: $(schedpolicyctl reset 2>&1)"
	# The harness itself runs as system.slice's systemd-test.service, and
	# polls busily on an emulated CPU: with system.slice managed (the
	# package's default) its load alone made every plan race to idle,
	# confining nothing. It is no part of the laptop: out, as a user would
	# take a unit out (the escape hatch; state.json, gone with the purge).
	schedpolicyctl exempt systemd-test.service >/dev/null 2>&1 || true
	# Exempt, its load is no workload's; but each of its checks spawns
	# runuser, systemctl and schedpolicyctl, slow under emulation (0.77
	# of a CPU in the run that showed it), and the workloads waited
	# behind it: their own CPU pressure made a confirmation spread
	# them (why="cpu pressure", policy performance) a few seconds after
	# each pack. At the lowest CPU weight it runs in the workloads'
	# idle time, as nothing on a laptop polls like this.
	systemctl set-property --runtime systemd-test.service CPUWeight=1 >/dev/null 2>&1 || true
	ld_eff=$(ld_efficient)
}

testcase_laptop_default_dropin() {
	check laptop-default-dropin-installed
	assert_true test -f "$ld_lib"
	assert_in '^Delegate=pids memory cpu cpuset$' "$(cat "$ld_lib")"
	assert_in '(^| )cpuset( |$)' "$(systemctl show -p DelegateControllers --value user@0.service 2>/dev/null)"
	pass "laptop-default-dropin-installed: $ld_lib; user@0.service DelegateControllers=$(systemctl show -p DelegateControllers --value user@0.service)"
	check laptop-default-conf-unedited
	assert_true cmp -s "$base" /etc/schedpolicyd/schedpolicyd.conf
	assert_in '^#manage = \["schedpolicyd.slice", "system.slice", "app.slice", "background.slice", "session.slice"\]$' "$(cat "$conf")"
	pass "laptop-default-conf-unedited: the package's configuration, every key commented out"
	# The install restarted nobody's manager: a lingering user's manager
	# that ran before it still runs as the same process.
	check laptop-default-no-manager-restart
	# A manager started without cpuset (as before the package: the
	# drop-in masked for its login), the drop-in back, the package
	# configured again: the manager keeps running, and the postinst names
	# it as waiting for the next login.
	mkdir -p "${ld_mask%/*}"
	ln -sf /dev/null "$ld_mask"
	systemctl daemon-reload
	ld_fresh_login
	rm -f "$ld_mask"
	systemctl daemon-reload
	pid=$(main_pid "$um" 2>/dev/null || true)
	assert_true test -n "$pid"
	c=$(cursor)
	dpkg-reconfigure schedpolicyd >/tmp/ld-reconf.log 2>&1 || fail_now "dpkg-reconfigure: $(tail -n 3 /tmp/ld-reconf.log)"
	assert_eq "$(main_pid "$um" 2>/dev/null || true)" "$pid"
	# The postinst names the managers whose cgroup still lacks cpuset
	# after its daemon-reload; none where systemd enabled cpuset on the
	# running manager's cgroup at that reload.
	ld_ctl=$(cat "$ucg/cgroup.controllers")
	case " $ld_ctl " in
	*" cpuset "*) assert_not_in "placed as a whole, unconfined:" "$(cat /tmp/ld-reconf.log)" ;;
	*) assert_in "placed as a whole, unconfined:.* user@$uid.service" "$(cat /tmp/ld-reconf.log)" ;;
	esac
	note "after the reconfigure, the running manager's cgroup.controllers: $ld_ctl"
	assert_not_in "Stopping User Manager for UID $uid|Stopped User Manager for UID $uid" "$(journal_since "$c")"
	pass "laptop-default-no-manager-restart: the postinst left $um alone (MainPID ${pid:-none}); it said: $(grep -o 'schedpolicyd: cpuset is delegated.*' /tmp/ld-reconf.log | head -n 1)"
}

testcase_laptop_default_whole() {
	ld_up
	trap 'rm -f "$ld_mask"; systemctl daemon-reload; ld_power on 2>/dev/null' EXIT
	# An administrator's undo: the drop-in masked; the user's manager
	# (started again) has no cpuset.
	mkdir -p "${ld_mask%/*}"
	ln -sf /dev/null "$ld_mask"
	systemctl daemon-reload
	ld_fresh_login
	check laptop-default-whole-not-delegated
	assert_not_in ' cpuset ' " $(cat "$ucg/cgroup.controllers") "
	pass "laptop-default-whole-not-delegated: $ucg/cgroup.controllers: $(cat "$ucg/cgroup.controllers")"
	c=$(cursor)
	systemctl restart "$unit"
	check laptop-default-whole-said-once
	journal_wait "$c" 30 "placed as a whole, never confined.*uid=$uid" || fail_now "$(journal_since "$c" -u "$unit" | grep -i user | tail -n 5)"
	ld_power off
	wait_until 60 ld_is_policy powersaving || fail_now "policy $(ld_policy) after the unplug"
	sleep 2 # a few plans
	assert_le "$(journal_since "$c" -u "$unit" | grep -c "placed as a whole, never confined.*uid=$uid")" 1
	pass "laptop-default-whole-said-once"
	check laptop-default-whole-unconfined
	assert_eq "$(wl_class "$um")" user
	assert_eq "$(sc "$um")" ""
	pass "laptop-default-whole-unconfined: $um class user, AllowedCPUs unset on battery (powersaving)"
	check laptop-default-whole-probe
	assert_in "user@$uid.service: placed as a whole, never confined: cpuset is not delegated to it now .*next login" "$(schedpolicyd probe 2>&1)"
	pass "laptop-default-whole-probe: $(schedpolicyd probe 2>&1 | grep "user@$uid.service" | sed 's/^ *//')"
}

testcase_laptop_default_units() {
	ld_up
	rm -f "$ld_mask"
	systemctl daemon-reload
	ld_fresh_login
	check laptop-default-delegated-at-login
	assert_in ' cpuset ' " $(cat "$ucg/cgroup.controllers") "
	assert_in "user@$uid.service: cpuset delegated now" "$(schedpolicyd probe 2>&1)"
	pass "laptop-default-delegated-at-login: $(schedpolicyd probe 2>&1 | grep "user@$uid.service" | sed 's/^ *//')"
	ld_start_units
	check laptop-default-units-adopted
	wait_workloads 30 $ld_uunits "$ld_sys" || fail_now "$(schedpolicyctl workloads 2>&1 | tr '\n' ';')"
	pass "laptop-default-units-adopted: $ld_uunits $ld_sys"
	# No attribute yet: the desktop says nothing of the focus.
	check laptop-default-no-focus
	assert_eq "$(wl_class "$ld_ff") $(wl_class "$ld_ed")" "app-nofocus app-nofocus"
	assert_in "none of its [0-9]+ apps carries user.xdg.inactive-since" "$(schedpolicyd probe 2>&1)"
	pass "laptop-default-no-focus: both apps app-nofocus; probe: $(schedpolicyd probe 2>&1 | grep 'focus:' | sed 's/^ *//')"
	ld_focus "$ld_ff" -1
	ld_focus "$ld_ed" 123456789
	check laptop-default-focus-classes
	assert_wait 10 sh -c "[ \"\$(schedpolicyctl workloads | awk '\$1 == \"$ld_ed\" { print \$2 }')\" = app ]"
	assert_eq "$(wl_class "$ld_ff") $(wl_class "$ld_ed") $(wl_class "$ld_idx") $(wl_class "$ld_shell") $(wl_class "$ld_pw") $(wl_class "$ld_sys")" \
		"focused app background session session service"
	pass "laptop-default-focus-classes: firefox focused, gedit app, tracker background, shell and pipewire session, $ld_sys service"
	excerpt "schedpolicyctl workloads (GNOME-shaped units)" schedpolicyctl workloads
}

testcase_laptop_default_battery() {
	ld_up
	user_setup
	workloads_are $ld_uunits "$ld_sys" || fail_now "run testcase_laptop_default_units first: $(schedpolicyctl workloads 2>&1 | tr '\n' ';')"
	trap 'ld_power on 2>/dev/null' EXIT
	note "efficient CPUs: ${ld_eff:-one class: packed means fewer than all of $all}"
	check laptop-default-ac
	ld_wait 60 ld_unconfined || fail_now "$(ld_show | tr '\n' ';')"
	assert_eq "$(ld_policy)" performance
	pass "laptop-default-ac: performance, nothing confined"
	excerpt "units on AC" ld_show

	t0=$(ld_now_ms)
	c=$(cursor)
	ld_power off
	check laptop-default-unplugged
	ld_wait 60 ld_battery_placed "$ld_ff" "$ld_ed" || fail_now "$(ld_tasks_ok; ld_diag "$c")"
	t1=$(ld_now_ms)
	assert_eq "$(ld_policy)" powersaving
	pass "laptop-default-unplugged: $((t1 - t0)) ms: tracker=$(usc "$ld_idx") $ld_sys=$(sc "$ld_sys") gedit=$(usc "$ld_ed") on the efficient CPUs; firefox, shell, pipewire unconfined; tasks as planned"
	excerpt "units unplugged" ld_show
	# It holds: no flapping back to spread with the same light load (the
	# daemon samples every few seconds; 8 s spans several plans).
	check laptop-default-unplugged-holds
	sleep 8
	ld_battery_placed "$ld_ff" "$ld_ed" || fail_now "$(ld_diag "$c")"
	pass "laptop-default-unplugged-holds: still placed 8 s later"

	# The focus moves to gedit: the two apps swap within a second. Timed
	# from the attributes' write to both cgroups' cpuset.cpus as systemd
	# wrote them (read by the shell alone: the full check below starts
	# systemctl and schedpolicyctl, seconds each under emulation).
	ld_focus "$ld_ed" -1 "$ld_ff" 987654321
	t0=$(ld_now_ms)
	check laptop-default-focus-switch
	t1=$t0
	while [ $((t1 - t0)) -lt 10000 ]; do
		[ -z "$(ld_cg_cpus "$ld_ed")" ] && [ -n "$(ld_cg_cpus "$ld_ff")" ] && break
		sleep 0.02
		t1=$(ld_now_ms)
	done
	assert_le "$((t1 - t0))" 1000
	ld_wait 30 ld_battery_placed "$ld_ed" "$ld_ff" || fail_now "$(ld_diag "$c")"
	pass "laptop-default-focus-switch: $((t1 - t0)) ms: gedit unconfined, firefox=$(usc "$ld_ff") (cgroup $(ld_cg_cpus "$ld_ff"))"
	excerpt "units after the focus switch" ld_show

	t0=$(ld_now_ms)
	ld_power on
	check laptop-default-plugged-in
	ld_wait 60 ld_unconfined || fail_now "$(ld_show | tr '\n' ';')"
	t1=$(ld_now_ms)
	assert_eq "$(ld_policy)" performance
	pass "laptop-default-plugged-in: $((t1 - t0)) ms: nothing confined"
	excerpt "units plugged in" ld_show
}

testcase_laptop_default_stop() {
	ld_up
	user_setup
	workloads_are $ld_uunits "$ld_sys" || fail_now "run testcase_laptop_default_units first"
	ld_power off
	# The battery testcase left gedit in front.
	ld_f=$ld_ed ld_u=$ld_ff
	[ "$(wl_class "$ld_ff")" = focused ] && ld_f=$ld_ff ld_u=$ld_ed
	ld_wait 60 ld_battery_placed "$ld_f" "$ld_u" || fail_now "not placed before the stop: $(ld_show | tr '\n' ';')"
	systemctl stop "$unit"
	check laptop-default-stop-resets
	for n in $ld_uunits; do assert_eq "$n=$(usc "$n")" "$n="; done
	assert_eq "$(sc "$ld_sys")" ""
	why=$(placed_ok usc ld_upid ld_ucg "$ld_uunits" noctl && units_ok "$ld_sys" noctl) || fail_now "$why"
	pass "laptop-default-stop-resets: every unit's AllowedCPUs= unset again, tasks on $all"
	check laptop-default-stop-state
	state_clean || fail_now "$(cat "$state")"
	pass laptop-default-stop-state
	ld_power on
}

# Run after the harness's purge (the runner's --always purge): what the
# package leaves of this scenario.
testcase_laptop_default_purged() {
	user_setup
	check laptop-default-purged
	assert_false test -e "$ld_lib"
	assert_false test -L "$ld_mask"
	for n in $ld_uunits; do assert_eq "$n=$(usc "$n")" "$n="; done
	assert_eq "$(sc "$ld_sys")" ""
	pass "laptop-default-purged: the drop-in gone, no AllowedCPUs= on the user's or the system's units"
	loginctl disable-linger sptest 2>/dev/null
	systemctl stop "$ld_sys" 2>/dev/null
	rmmod testpower 2>/dev/null || true
}

# A user's manager already running when cpuset reached its cgroup, as on
# a first install with the user logged in (the drop-in masked for its
# login, then unmasked and the system manager reloaded, as the postinst
# does): it stores AllowedCPUs= and never turns cpuset on for its units
# (systemd 252). The daemon finds so after its first write, says so,
# gives the unit its own value back and places nothing of that manager;
# from the user's next login it places the same unit.
rm_unit=rm-bg.service
rm_start() { ur systemd-run --user --quiet --slice=background.slice --unit="$rm_unit" sleep 100000; }
rm_unset() { [ -z "$(usc "$rm_unit")" ]; }
rm_cg() { echo "$ucg/background.slice/$rm_unit"; }
# rm_said CURSOR: the daemon's lines since CURSOR on the inert manager.
rm_said() { journal_since "$1" -u "$unit" | grep -E 'does not apply it'; }
# rm_confined: the unit's entry in status's confined list, if any.
rm_confined() {
	schedpolicyctl status --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(c["name"] for c in json.load(sys.stdin).get("confined") or [] if c["name"] == sys.argv[1]))' "$rm_unit"
}
rm_placed() {
	rp_v=
	read -r rp_v <"$(rm_cg)/cpuset.cpus" 2>/dev/null
	ld_packed "$(usc "$rm_unit")" && [ "$rp_v" = "$(usc "$rm_unit")" ] &&
		[ "$(cpus_allowed "$(head -n 1 "$(rm_cg)/cgroup.procs")")" = "$rp_v" ]
}
testcase_laptop_default_running_manager() {
	ld_up
	trap 'rm -f "$ld_mask"; systemctl daemon-reload; ld_power on 2>/dev/null' EXIT
	mkdir -p "${ld_mask%/*}"
	ln -sf /dev/null "$ld_mask"
	systemctl daemon-reload
	ld_fresh_login
	rm -f "$ld_mask"
	systemctl daemon-reload
	check laptop-default-running-manager-inert
	assert_in ' cpuset ' " $(cat "$ucg/cgroup.controllers") "
	c=$(cursor)
	rm_start
	wait_workloads 30 "$rm_unit" || fail_now "$(schedpolicyctl workloads 2>&1 | tr '\n' ';')"
	ld_power off
	journal_wait "$c" 120 "stores AllowedCPUs= but does not apply it.*uid=$uid" ||
		fail_now "$(journal_since "$c" -u "$unit" | grep -iE 'user|rm-bg' | tail -n 8 | tr '\n' ';')"
	ld_wait 60 rm_unset || fail_now "AllowedCPUs=$(usc "$rm_unit") after the daemon found the manager inert"
	assert_false test -e "$(rm_cg)/cpuset.cpus"
	assert_eq "$(cpus_allowed "$(head -n 1 "$(rm_cg)/cgroup.procs")")" "$all"
	assert_eq "$(rm_confined)" ""
	pass "laptop-default-running-manager-inert: said so, $rm_unit's AllowedCPUs= unset again, its task on $all, not shown confined"
	excerpt "journal: the manager found inert" rm_said "$c"

	check laptop-default-running-manager-next-login
	ld_fresh_login
	rm_start
	ld_wait 90 rm_placed || fail_now "AllowedCPUs=$(usc "$rm_unit") cgroup=$(cat "$(rm_cg)/cpuset.cpus" 2>&1) $(ld_diag "$c")"
	pass "laptop-default-running-manager-next-login: $rm_unit AllowedCPUs=$(usc "$rm_unit"), in its cgroup and its task's mask"
	ur systemctl --user stop "$rm_unit" 2>/dev/null
	ld_power on
}

laptop_default_testcases="laptop_default_dropin laptop_default_whole laptop_default_units laptop_default_battery laptop_default_stop laptop_default_running_manager"
