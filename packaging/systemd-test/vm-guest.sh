#!/bin/sh
# vm-guest.sh — the cgroup v2 checks of issue 17, run inside the QEMU VM by
#   packaging/systemd-test/vm.sh packaging/systemd-test/vm-guest.sh
# (systemd 252 as PID 1, the unified hierarchy with the cpuset controller).
# The testcases run in the order of run_testcases at the end (lib.sh);
# install and purge always, the others as SCHEDPOLICYD_TEST_MATCH picks.
#
# install: dpkg -i: the service is enabled and active, StatusText carries
#    the policy, the bus name is owned by MainPID when the start returns and
#    before systemd makes the unit active (Type=notify: seen on the bus, and
#    both lines in the journal), and placement "auto" chooses systemd.
# cgroupfs: placement = "cgroupfs": the daemon makes /sys/fs/cgroup/schedpolicyd
#    with the cpuset controller; three workloads (schedpolicyctl run):
#    after every policy switch each workload's cpuset.cpus.effective and
#    its task's Cpus_allowed_list are exactly what `schedpolicyctl
#    workloads --json` reports; performance gives every workload all the
#    managed parent's CPUs, powersaving packs them on fewer. systemctl stop
#    restores every workload's original cpuset (the tasks run on the
#    parent's full set again) and state.json keeps no cpuset of the
#    daemon's; once the workloads end, the next start removes their
#    cgroups and every record.
# systemd_manager_client, systemd_units, slice_rules, purge: placement.sh;
#    systemd_units here: placement "auto" choosing systemd, units placed,
#    switched, recovered after kill -9 and reset at stop, asserted on the
#    applied cpusets; the CPU pressure trigger's wake.
# user_units: cpuset delegated to user@.service: a user's own units.
# surface_*: the systemd surface (surface.sh): set-property, daemon-reload
#    and -reexec, restarts, failures, a unit file removed and created
#    again, 300 transient services at once, a user logging out and in,
#    each with a kill -9 of the daemon in its middle.
# laptop_*: the laptop issue (laptop.sh): power-profiles-daemon beside us,
#    journal priorities, the placement's info line, an unclean stop.
# battery: a real battery (battery.sh): a test power_supply module's
#    uevents take the daemon from AC to battery, low battery and back.
lib=${SYSTEMD_TEST_LIB:-./lib.sh}
. "$lib"
. "${lib%/*}/placement.sh"
. "${lib%/*}/surface.sh"
. "${lib%/*}/laptop.sh"
. "${lib%/*}/battery.sh"
. "${lib%/*}/laptop-default.sh"

parent=/sys/fs/cgroup/schedpolicyd
names="wl1 wl2 wl3"
# The configuration every testcase after the install starts from: the
# package's (install saves it).
base=/tmp/conf.orig
all=$(cat /sys/devices/system/cpu/online)
last=$(echo "$all" | sed 's/.*[-,]//')
# units_conf LINE...: the configuration of the testcases that place units
# through systemd (placement.sh): "auto" chooses it here.
units_conf() { use_conf "$base" 'log_level = "debug"' "$@"; }
policy_now() { schedpolicyctl status --json | sed -n 's/^  "active_policy": "\(.*\)",$/\1/p'; }

# --- Install ---------------------------------------------------------------------
testcase_install() {
	deb=${SYSTEMD_TEST_DEB:?the .deb to install}
	note "guest: $(uname -r), $(systemctl --version | head -n 1), /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), CPUs $(cat /sys/devices/system/cpu/online)"
	c0=$(cursor)
	dbus_monitor_start /tmp/monitor.log
	check install-dpkg
	dpkg -i "$deb" >/tmp/dpkg-i.log 2>&1 || fail_now "dpkg -i exited non-zero: $(tail -n 5 /tmp/dpkg-i.log | tr '\n' ' ')"
	pass install-dpkg
	cp "$conf" "$base"
	# Type=notify: postinst's start returned once READY=1 came, so the name
	# is owned now, by the main process, with no waiting.
	owner=$(bus_owner_pid)
	check install-bus-name-owned-at-start
	[ -n "$owner" ] && [ "$owner" = "$(main_pid "$unit")" ] ||
		fail_now "right after dpkg -i (the start) returned: owner PID '$owner', MainPID '$(main_pid "$unit")'"
	pass install-bus-name-owned-at-start
	check install-ready-after-bus-name
	bus_order /tmp/monitor.log || fail_now "dbus-monitor: name owned at line '${owned}', unit active at line '${activated}'"
	pass install-ready-after-bus-name
	check install-enabled
	assert_eq "$(systemctl is-enabled "$unit" 2>&1)" enabled
	pass install-enabled
	check install-active
	assert_eq "$(systemctl is-active "$unit" 2>&1)" active
	pass install-active
	pol=$(policy_now)
	status=$(prop "$unit" StatusText)
	check install-status-text
	[ -n "$pol" ] || fail_now "schedpolicyctl status --json has no active_policy"
	assert_in "^policy $pol \(power_aware [012]\), power source " "$status"
	pass install-status-text

	# Both sides in the journal too (the daemon's line may be filed after
	# systemd's: wait for it).
	check install-journal-bus-name-and-started
	journal_wait "$c0" 10 'msg="owning bus name"' && journal_wait "$c0" 10 'systemd\[1\]: Started schedpolicyd.service' ||
		fail_now "no daemon \"owning bus name\" or no systemd \"Started schedpolicyd.service\" in the journal"
	pass install-journal-bus-name-and-started
	journal_since "$c0" -u "$unit" >/tmp/j-install
	note "  journal order (not a check): \"owning bus name\" at line $(grep -n 'msg="owning bus name"' /tmp/j-install | head -n 1 | cut -d: -f1), \"Started\" at line $(grep -n 'systemd\[1\]: Started schedpolicyd' /tmp/j-install | head -n 1 | cut -d: -f1); dbus-monitor: name owned at line $owned, unit active at line $activated"

	# The package's default placement = "auto" chooses systemd here by itself.
	check install-auto-chooses-systemd
	journal_wait "$c0" 10 'msg="managing units through systemd" cgroup_v2=true' &&
		journal_since "$c0" | grep -q 'msg="placement chosen" placement=systemd why="auto: systemd is PID 1 and /sys/fs/cgroup is cgroup v2"' ||
		fail_now "$(journal_since "$c0" | grep -E 'placement chosen|managing|placement disabled')"
	pass install-auto-chooses-systemd
	excerpt "journal: install and start" cat /tmp/j-install
}

# --- The cgroupfs placement on v2 (placement = "cgroupfs") ---------------------------
# The daemon's own parent /sys/fs/cgroup/schedpolicyd, its children
# written directly.

# workloads_json: "NAME CPUS" per workload, from schedpolicyctl workloads
# --json ("-" for an empty set).
workloads_json() {
	schedpolicyctl workloads --json | awk '
		/^    "name": / { n = $2; gsub(/[",]/, "", n) }
		/^    "cpus": / { c = $2; gsub(/[",]/, "", c); if (c == "") c = "-"; print n, c }'
}
pid_of() { eval echo "\${pid_$1:-}"; }

# placed POLICY: POLICY is active (schedpolicyctl, systemd's StatusText);
# every workload as schedpolicyctl reports it, its cgroup's
# cpuset.cpus.effective and its task's Cpus_allowed_list agree exactly, and
# POLICY's rule holds (performance: the parent's whole set; powersaving:
# fewer CPUs than that). Says what differs on stdout.
placed() {
	want=$1
	full=$(cat "$parent/cpuset.cpus.effective")
	nfull=$(cpulist_count "$full")
	[ "$(policy_now)" = "$want" ] || { echo "active policy is $(policy_now), not $want"; return 1; }
	st=$(prop "$unit" StatusText)
	case $st in "policy $want "*) ;; *) echo "StatusText is \"$st\", not policy $want"; return 1 ;; esac
	workloads_json >/tmp/wl
	for n in $names; do
		rep=$(awk -v n="$n" '$1 == n { print $2 }' /tmp/wl)
		eff=$(cat "$parent/$n/cpuset.cpus.effective" 2>/dev/null)
		pid=$(pid_of "$n")
		task=$(cpus_allowed "$pid")
		[ -n "$rep" ] || { echo "$n: not in schedpolicyctl workloads --json"; return 1; }
		[ "$rep" = "$eff" ] || { echo "$n: schedpolicyctl reports $rep, cpuset.cpus.effective is $eff"; return 1; }
		[ "$task" = "$eff" ] || { echo "$n: cpuset.cpus.effective is $eff, task $pid's Cpus_allowed_list is $task"; return 1; }
		case $want in
		performance) [ "$eff" = "$full" ] || { echo "$n: $eff under performance, not the parent's $full"; return 1; } ;;
		powersaving) [ "$(cpulist_count "$eff")" -lt "$nfull" ] || { echo "$n: $eff under powersaving, not packed below the parent's $full"; return 1; } ;;
		esac
	done
	return 0
}

# switch POLICY N: schedpolicyctl set POLICY, then wait (10 s) for placed;
# the check switch-POLICY-N.
switch() {
	check "switch-$1-$2"
	out=$(schedpolicyctl set "$1" 2>&1) || fail_now "schedpolicyctl set $1: $out"
	wait_until 10 placed "$1" || fail_now "$(placed "$1")"
	pass "switch-$1-$2"
	sets=""
	for n in $names; do sets="$sets $n=$(cat "$parent/$n/cpuset.cpus.effective")/$(cpus_allowed "$(pid_of "$n")")"; done
	note "  $1: cpuset.cpus.effective/Cpus_allowed_list:$sets (parent $(cat "$parent/cpuset.cpus.effective"))"
}

# records: "PATH ORIGINAL written|clean" per record of state.json (ORIGINAL
# "-" for the empty set; written: it holds a cpuset the daemon wrote).
# state.json is indented JSON, one field a line, and records are flat.
records() {
	awk '
		/"path": / { p = $2; gsub(/[",]/, "", p) }
		/"original_cpus": / { o = $2; gsub(/[",]/, "", o) }
		/"(applied|pending)_cpus": |"unverified": / { w = 1 }
		/^    }/ { if (p != "") print p, (o == "" ? "-" : o), (w ? "written" : "clean"); p = ""; o = ""; w = 0 }' "$state"
}

testcase_cgroupfs() {
	use_conf "$base" 'placement = "cgroupfs"'
	trap 'for n in $names; do kill "$(pid_of "$n")" 2>/dev/null; done; cp "$base" "$conf"' EXIT
	c0=$(cursor)
	systemctl restart "$unit"
	wait_until 20 unit_running
	journal_wait "$c0" 10 'msg="managing workloads"'
	journal_since "$c0" -u "$unit" >/tmp/j-install
	check install-placement
	disabled=$(grep 'workload placement disabled' /tmp/j-install | head -n 1)
	[ -z "$disabled" ] || fail_now "${disabled#*schedpolicyd*]: }"
	grep -q "msg=\"managing workloads\" path=$parent version=v2" /tmp/j-install || fail_now "no \"managing workloads\" path=$parent version=v2 in the journal"
	[ -d "$parent" ] || fail_now "$parent does not exist"
	grep -qw cpuset "$parent/cgroup.controllers" && grep -qw cpuset "$parent/cgroup.subtree_control" ||
		fail_now "cpuset missing from $parent: controllers \"$(cat "$parent/cgroup.controllers")\", subtree_control \"$(cat "$parent/cgroup.subtree_control")\""
	pass install-placement
	excerpt "cgroups after start" sh -c "echo /sys/fs/cgroup/cgroup.subtree_control: \$(cat /sys/fs/cgroup/cgroup.subtree_control); echo $parent/cgroup.controllers: \$(cat $parent/cgroup.controllers); echo $parent/cpuset.cpus.effective: \$(cat $parent/cpuset.cpus.effective)"

	# A cgroupfs parent in systemd's own v2 tree breaks its one-writer
	# rule: the daemon and probe say so. A parent inside a unit's delegated
	# subtree (Delegate=yes sets the delegate xattr) is the unit's to
	# write: no warning.
	foreign='placement \"cgroupfs\" writes /sys/fs/cgroup/schedpolicyd and the root cgroup'"'"'s cgroup.subtree_control on a cgroup v2 machine whose cgroups systemd owns'
	check cgroupfs-foreign-warning
	journal_since "$c0" | grep -qF "$foreign" || fail_now "no such warning in the journal since the restart"
	schedpolicyd probe --bus none | grep -q '^warning: *placement "cgroupfs" writes /sys/fs/cgroup/schedpolicyd ' ||
		fail_now "probe: $(schedpolicyd probe --bus none 2>&1 | grep -E '^(placement|warning)')"
	systemd-run -q --unit=spdeleg.service -p Delegate=yes sleep 600
	printf 'placement = "cgroupfs"\ncgroup_root = "/sys/fs/cgroup/system.slice/spdeleg.service/work"\n' >/tmp/deleg.conf
	out=$(schedpolicyd probe --bus none --config /tmp/deleg.conf 2>&1)
	systemctl stop spdeleg.service
	printf '%s\n' "$out" | grep -q '^warning: *placement "cgroupfs"' &&
		fail_now "a delegated subtree was warned about: $(printf '%s\n' "$out" | grep -E '^(placement|  cgroup root|warning)')"
	printf '%s\n' "$out" | grep -q '^  cgroup root: /sys/fs/cgroup/system.slice/spdeleg.service/work$' ||
		fail_now "probe did not read cgroup_root: $(printf '%s\n' "$out" | grep -E '^(placement|  cgroup root)')"
	note "the journal and probe warn about $parent; a parent in spdeleg.service's delegated subtree is not warned about"
	pass cgroupfs-foreign-warning

	# Workloads and policy switches.
	for n in $names; do
		# Output away from the unit's pipe, or it never closes.
		schedpolicyctl run --name "$n" -- sleep 1000 </dev/null >/dev/null 2>&1 &
		eval "pid_$n=$!"
	done
	check workloads-run
	for n in $names; do
		pid=$(pid_of "$n")
		wait_until 10 grep -qx "$pid" "$parent/$n/cgroup.procs" ||
			fail_now "$n: task $pid is not in $parent/$n/cgroup.procs ($(cat "/proc/$pid/cgroup" 2>&1))"
	done
	pass workloads-run
	check workloads-listed
	wait_until 10 sh -c "[ \$(schedpolicyctl workloads --json | grep -c '\"name\"') = 3 ]" ||
		fail_now "schedpolicyctl workloads --json: $(schedpolicyctl workloads --json 2>&1 | tr -d '\n ')"
	pass workloads-listed
	excerpt "schedpolicyctl workloads (started)" schedpolicyctl workloads
	# `schedpolicyctl run --name X` a second time, with X's cgroup holding
	# its task: the daemon answers FileExists and stays up (surface.sh
	# checks the same under placement "systemd").
	check workloads-run-twice
	run_twice wl1 >/tmp/run-twice.why || fail_now "$(cat /tmp/run-twice.why)"
	pass "workloads-run-twice: a second run --name wl1 is refused (exit $r2_rc: $r2_out); the daemon (pid $r2_pid) stays up, no restart, no panic"

	switch performance 1
	switch powersaving 1
	switch performance 2
	switch powersaving 2
	excerpt "schedpolicyctl workloads (powersaving)" schedpolicyctl workloads

	# Stop and restore.
	records >/tmp/rec-before
	excerpt "state.json before stop" cat "$state"
	c1=$(cursor)
	check stop
	systemctl stop "$unit" || fail_now "systemctl stop exited non-zero"
	st=$(systemctl is-active "$unit" 2>&1)
	[ "$st" = inactive ] || fail_now "is-active says $st after systemctl stop ($(prop "$unit" Result))"
	pass stop
	journal_since "$c1" -u "$unit" >/tmp/j-stop
	excerpt "journal: stop" cat /tmp/j-stop

	full=$(cat "$parent/cpuset.cpus.effective")
	# An empty original is v2's "inherit", which the kernel (6.1) refuses
	# to give back to a cgroup with tasks (ENOSPC): the daemon writes every
	# possible CPU instead ("0-N"), which gives the same effective CPUs.
	possible=$(cat /sys/devices/system/cpu/possible)
	why=""
	for n in $names; do
		orig=$(awk -v p="$parent/$n" '$1 == p { print $2 }' /tmp/rec-before)
		req=$(cat "$parent/$n/cpuset.cpus")
		eff=$(cat "$parent/$n/cpuset.cpus.effective")
		task=$(cpus_allowed "$(pid_of "$n")")
		if [ -z "$orig" ]; then
			why="$why; $n: no record in state.json before the stop"
		elif [ "$orig" = - ] && [ -n "$req" ] && [ "$req" != "$possible" ]; then
			why="$why; $n: cpuset.cpus is \"$req\", its original \"\" (inherit): want \"\" or every possible CPU ($possible)"
		elif [ "$orig" != - ] && [ "$req" != "$orig" ]; then
			why="$why; $n: cpuset.cpus is \"$req\", its original \"$orig\""
		elif [ "$eff" != "$full" ] || [ "$task" != "$full" ]; then
			why="$why; $n: cpuset.cpus.effective $eff, Cpus_allowed_list $task, not the parent's $full"
		fi
		note "  after stop: $n cpuset.cpus=\"$req\" (original \"${orig#-}\") cpuset.cpus.effective=$eff Cpus_allowed_list=$task"
	done
	check stop-restores-originals
	[ -z "$why" ] || fail_now "${why#; }"
	pass stop-restores-originals
	# What may stay: the records of the workloads the daemon made (their
	# tasks still run; the next start removes them once empty), and only
	# with nothing of the daemon's written.
	check stop-state-clean
	[ -f "$state" ] || fail_now "no $state after the stop"
	records >/tmp/rec-after
	excerpt "state.json after stop" cat "$state"
	! grep -q ' written$' /tmp/rec-after || fail_now "state.json still holds cpusets of the daemon's: $(grep ' written$' /tmp/rec-after | tr '\n' ' ')"
	[ "$(grep -c '"created": true' "$state")" = "$(wc -l </tmp/rec-after)" ] ||
		fail_now "state.json keeps records that are not workloads the daemon made: $(tr '\n' ' ' </tmp/rec-after)"
	pass stop-state-clean

	# The workloads end; the next start removes the cgroups it made, and
	# state.json is left with no record at all.
	for n in $names; do
		pid=$(pid_of "$n")
		[ -n "$pid" ] && kill "$pid" 2>/dev/null
	done
	gone() { for n in $names; do [ ! -d "$parent/$n" ] || return 1; done; }
	check restart-reaps
	systemctl start "$unit" || fail_now "systemctl start exited non-zero"
	wait_until 15 gone || fail_now "workload cgroups left after the restart: $(ls "$parent")"
	systemctl stop "$unit"
	excerpt "state.json after restart and stop" cat "$state"
	! grep -q '"cgroups"' "$state" || fail_now "state.json keeps records after the workloads were removed: $(tr -d ' \n' <"$state")"
	pass restart-reaps
}

# --- cpuset delegated to user@.service: a user's own units, the focused app ----------
testcase_user_units() {
	# The administrator's drop-in of docs/USERS.md delegates cpuset to every
	# user's manager. Then the daemon places the units of the lingering user's
	# app.slice and background.slice through that user's manager (not
	# user@UID.service as a whole), each app's class follows the
	# user.xdg.inactive-since xattr set as Mutter would, kill -9 and stop
	# reset exactly its values through the user manager, and the user's
	# logout forgets its records.
	user_linger 60
	apps="app-sptest-a.scope app-sptest-b.scope bg-sptest.scope"
	acg() { case $1 in bg-*) echo "$ucg/background.slice/$1" ;; *) echo "$ucg/app.slice/$1" ;; esac; }
	apid() { head -n 1 "$(acg "$1")/cgroup.procs" 2>/dev/null; }
	setfocus() { ur python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.xdg.inactive-since", sys.argv[2].encode())' "$(acg "$1")" "$2"; }
	# show_apps [noctl]: noctl while the daemon is stopped (schedpolicyctl
	# would start it again by D-Bus activation, which places the units anew).
	show_apps() { for n in $apps; do echo "$n$([ "${1:-}" = noctl ] || echo " class=$(wl_class "$n")") AllowedCPUs=$(usc "$n") effective=$(cat "$(acg "$n")/cpuset.cpus.effective" 2>/dev/null) task=$(cpus_allowed "$(apid "$n")")"; done; }
	# apps_ok [noctl]: placed_ok for the apps, in their user manager.
	apps_ok() { placed_ok usc apid acg "$apps" "${1:-}"; }
	trap 'systemctl stop "$unit"; loginctl disable-linger sptest; cp "$base" "$conf"
		rm -f /etc/systemd/system/user@.service.d/50-delegate-cpuset.conf; systemctl daemon-reload' EXIT
	user_delegate on
	dc=$(prop "$um" DelegateControllers)
	ctl=$(cat "$ucg/cgroup.controllers" 2>/dev/null)
	check user-cpuset-delegated
	assert_in ' cpuset ' " $ctl "
	pass "user-cpuset-delegated: DelegateControllers=$dc, $ucg/cgroup.controllers: $ctl"
	units_conf 'manage = ["schedpolicyd.slice", "app.slice", "background.slice"]'
	check user-probe
	schedpolicyd probe 2>&1 | grep -q "user:  *user@$uid.service: cpuset delegated" ||
		fail_now "$(schedpolicyd probe 2>&1 | grep -A3 placement)"
	pass "user-probe: $(schedpolicyd probe 2>&1 | grep "user@$uid.service" | sed 's/^ *//')"
	c6=$(cursor)
	systemctl restart "$unit"
	check user-manager-followed
	journal_wait "$c6" 30 "msg=\"following users through logind\" .*users=[^ ]*$uid" &&
		journal_wait "$c6" 30 "msg=\"cpuset is delegated to the user's manager.*uid=$uid" &&
		journal_wait "$c6" 30 "msg=\"managing a user's units through its manager\".*uid=$uid" ||
		fail_now "$(journal_since "$c6" | grep -iE 'user|logind' | tail -n 5)"
	pass "user-manager-followed: through logind, cpuset delegated, units through user@$uid's manager"
	ur systemd-run --user --quiet --scope --slice=app.slice --unit=app-sptest-a sleep 1000 </dev/null >/tmp/app-a.log 2>&1 &
	ur systemd-run --user --quiet --scope --slice=app.slice --unit=app-sptest-b sleep 1000 </dev/null >/tmp/app-b.log 2>&1 &
	ur systemd-run --user --quiet --scope --slice=background.slice --unit=bg-sptest sleep 1000 </dev/null >/tmp/bg.log 2>&1 &
	check user-units-adopted
	wait_workloads 20 $apps ||
		fail_now "$(schedpolicyctl workloads 2>&1; cat /tmp/app-a.log /tmp/bg.log; journal_since "$c6" | grep -E 'user|listing|adopted' | tail -n 8)"
	pass user-units-adopted
	check user-manager-not-whole
	! workloads_are "$um" || fail_now "$um is still a workload with cpuset delegated"
	pass user-manager-not-whole
	# Who may set user.* xattrs on cgroupfs: the cgroup's owner (here the
	# user, who owns its delegated subtree) and root; not the user on a
	# cgroup of the system's.
	check user-xattr-owner
	! ur python3 -c 'import os; os.setxattr("/sys/fs/cgroup/system.slice", "user.xdg.inactive-since", b"-1")' 2>/tmp/xattr-sys.log ||
		fail_now "the user could set user.xdg.inactive-since on /sys/fs/cgroup/system.slice"
	pass "user-xattr-owner: not on system.slice ($(tail -n 1 /tmp/xattr-sys.log | sed 's/.*Error: //'))"
	# IN_ATTRIB for setxattr on cgroup v2 (kernfs), seen by a plain inotify
	# watch of root's while the user writes, as Mutter would.
	cat >/tmp/inattrib.py <<-'PY'
	import ctypes, os, select, subprocess, sys
	libc = ctypes.CDLL(None, use_errno=True)
	fd = libc.inotify_init1(os.O_NONBLOCK)
	if libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x4) < 0:
	    sys.exit("inotify_add_watch: errno %d" % ctypes.get_errno())
	subprocess.run(sys.argv[2:], check=True)
	r, _, _ = select.select([fd], [], [], 10)
	print("IN_ATTRIB" if r else "no event")
	PY
	ev=$(python3 /tmp/inattrib.py "$(acg app-sptest-b.scope)" runuser -u sptest -- python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.xdg.inactive-since", b"5")' "$(acg app-sptest-b.scope)" 2>&1)
	check user-xattr-inattrib
	assert_eq "$ev" IN_ATTRIB
	pass "user-xattr-inattrib: setxattr by the user raises IN_ATTRIB on the cgroup v2 directory"
	xa() { python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.xdg.inactive-since").decode())' "$(acg "$1")" 2>&1; }
	focus_diag() { echo "xattr a=$(xa app-sptest-a.scope) b=$(xa app-sptest-b.scope)"; show_apps; journal_since "$c6" | grep -E 'focus|unit gone|adopted unit|user manager|managing a user|slow unit event' | tail -n 25; }
	setfocus app-sptest-a.scope -1 && setfocus app-sptest-b.scope 123456789
	check user-focus-class
	wait_until 10 sh -c "[ \"\$(schedpolicyctl workloads | awk '\$1 == \"app-sptest-a.scope\" { print \$2 }')\" = focused ]" &&
		[ "$(wl_class app-sptest-b.scope)" = app ] && [ "$(wl_class bg-sptest.scope)" = background ] ||
		fail_now "$(focus_diag)"
	pass "user-focus-class: a focused, b app, bg-sptest background"
	setfocus app-sptest-a.scope 987654321 && setfocus app-sptest-b.scope -1
	check user-focus-follows
	wait_until 10 sh -c "[ \"\$(schedpolicyctl workloads | awk '\$1 == \"app-sptest-b.scope\" { print \$2 }')\" = focused ]" &&
		[ "$(wl_class app-sptest-a.scope)" = app ] ||
		fail_now "$(focus_diag)"
	pass "user-focus-follows: b focused, a app (no polling: IN_ATTRIB)"
	excerpt "schedpolicyctl workloads (a user's units)" schedpolicyctl workloads
	# usc_set SECONDS UNIT / usc_unset: until the user's UNIT has an
	# AllowedCPUs= / none.
	usc_set() { wait_until "$1" sh -c "[ -n \"\$(runuser -u sptest -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user show -p AllowedCPUs --value $2)\" ]"; }
	usc_unset() { wait_until "$1" sh -c "[ -z \"\$(runuser -u sptest -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user show -p AllowedCPUs --value $2)\" ]"; }
	for pol in powersaving performance powersaving; do
		schedpolicyctl set "$pol" >/dev/null
		if [ "$pol" = powersaving ]; then usc_set 10 bg-sptest.scope; else usc_unset 10 bg-sptest.scope; fi
		check "user-switch-$pol"
		why=$(apps_ok) || fail_now "$why"
		a=$(usc app-sptest-a.scope) b=$(usc app-sptest-b.scope) g=$(usc bg-sptest.scope)
		case $pol in
		# b has the focus: the focused app is never confined.
		powersaving) [ -n "$a" ] && [ -z "$b" ] && [ -n "$g" ] && [ -z "$(sc "$um")" ] ;;
		performance) [ -z "$a" ] && [ -z "$b" ] && [ -z "$g" ] ;;
		esac || fail_now "AllowedCPUs a=$a b=$b bg=$g $um=$(sc "$um")"
		pass "user-switch-$pol: AllowedCPUs a=${a:-unset} b=${b:-unset} bg=${g:-unset} in the user's manager, applied to the tasks"
		excerpt "user units after $pol" show_apps
	done
	check user-records
	grep -q "\"manager\": \"user:$uid\"" "$state" || fail_now "$(cat "$state")"
	pass "user-records: state.json names manager user:$uid"
	pid=$(main_pid "$unit")
	c7=$(cursor)
	systemctl kill -s KILL "$unit"
	check user-kill-9-recovers
	wait_until 40 restarted_from "$pid" &&
		journal_wait "$c7" 15 'original AllowedCPUs recovered from saved state.*manager=.user:'"$uid"'.*unit=bg-sptest.scope' ||
		fail_now "$(journal_since "$c7" | grep -iE 'recover|adopted unit' | tail -n 4)"
	pass "user-kill-9-recovers: bg-sptest.scope AllowedCPUs=$(usc bg-sptest.scope) known as ours"
	systemctl stop "$unit"
	check user-stop-resets
	[ -z "$(usc app-sptest-a.scope)$(usc app-sptest-b.scope)$(usc bg-sptest.scope)" ] && why=$(apps_ok noctl) ||
		fail_now "$(show_apps noctl) ${why:-}"
	pass "user-stop-resets: every app's AllowedCPUs unset again, tasks on $all"
	excerpt "user units after the stop" show_apps noctl
	check user-stop-state
	state_clean || fail_now "$(cat "$state")"
	pass user-stop-state
	# Logout: the user's manager goes, with its units and their runtime
	# values; the daemon forgets them and their records.
	systemctl start "$unit"
	schedpolicyctl set powersaving >/dev/null
	usc_set 15 bg-sptest.scope
	c8=$(cursor)
	loginctl disable-linger sptest
	check user-logout-forgets
	journal_wait "$c8" 30 "msg=\"user logged out\".*uid=$uid" &&
		wait_until 10 sh -c "! schedpolicyctl workloads | grep -qE '^(app|bg)-sptest'" &&
		wait_until 10 sh -c "! grep -q '\"user:$uid\"' $state" ||
		fail_now "$(schedpolicyctl workloads; cat "$state"; journal_since "$c8" | grep -iE 'user|record' | tail -n 5)"
	pass "user-logout-forgets: units gone from schedpolicyctl workloads, no user:$uid record in state.json"
	excerpt "journal: logout" sh -c "journalctl --no-pager --after-cursor='$c8' | grep -E 'logged out|record forgotten|unit gone'"
}

run_testcases --always install \
	cgroupfs systemd_manager_client systemd_units slice_rules user_units \
	$surface_testcases \
	laptop_ppd laptop_journal laptop_placed laptop_unclean \
	battery energy_prefs \
	$laptop_default_testcases \
	--always purge laptop_default_purged
