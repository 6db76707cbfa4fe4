#!/bin/sh
# container-guest.sh — the checks of `make systemd-test` that run inside the
# nspawn container, with systemd 252 as PID 1, its dbus-daemon and polkitd,
# and the package installed with dpkg -i. container.sh starts it with
# nsenter and collects its "systemd-test:" lines (lib.sh: the testcases
# below run in the order of run_testcases at the end; install and purge
# always, the others as SCHEDPOLICYD_TEST_MATCH picks).
#
# The container gives us:
#   /mnt/host    read-only: the .deb, lib.sh, this script and the scripts
#                it sources
#   /mnt/cpuset  a writable cgroup v1 cpuset directory the host made for
#                this run (the container's own /sys/fs/cgroup is read-only);
#                the daemon manages /mnt/cpuset/schedpolicyd below it.
# Everything written elsewhere goes to the container's volatile overlay.
set -u
lib=${SYSTEMD_TEST_LIB:-/mnt/host/lib.sh}
. "$lib"
. "${lib%/*}/placement.sh"
. "${lib%/*}/surface.sh"
. "${lib%/*}/laptop.sh"

parent=/mnt/cpuset/schedpolicyd
# The base configuration of every testcase after the install (install
# writes it): the package's, with the managed parent below /mnt/cpuset and
# debug logging.
base=/tmp/conf.good
all=$(cat /mnt/cpuset/cpuset.cpus 2>/dev/null)
last=$(cat /mnt/cpuset/cpuset.effective_cpus 2>/dev/null | tr ',' '\n' | tail -n 1 | sed 's/.*-//')

# wl_check: every workload's cpuset.cpus, its task's Cpus_allowed_list
# and what schedpolicyctl reports agree; prints "name=cpus" pairs.
wl_check() {
	ok=1 seen=""
	for w in wl1 wl2 wl3; do
		file=$(cat "$parent/$w/cpuset.cpus" 2>/dev/null)
		told=$(ucpus "$w")
		pid=$(head -n 1 "$parent/$w/cgroup.procs" 2>/dev/null)
		task=$([ -n "$pid" ] && cpus_allowed "$pid")
		seen="$seen $w=$file"
		if [ -z "$file" ] || [ "$file" != "$told" ] || [ "$file" != "$task" ]; then
			ok=0
			seen="$seen(ctl=$told,task=$task)"
		fi
	done
	echo "$seen"
	[ "$ok" = 1 ]
}
# units_conf LINE...: the configuration of the testcases that place units
# through systemd (placement.sh).
units_conf() { use_conf "$base" 'placement = "systemd"' "$@"; }
three_workloads() { [ "$(schedpolicyctl workloads | grep -c '^wl[123] ')" = 3 ]; }
# wl_up: the three workloads of the cgroupfs checks, made once: wl3 by
# hand with its own cpuset (the last CPU) while the daemon is stopped, so
# that its original differs from anything the balancer writes and is
# what the daemon finds (made while it runs, the write would be a user's
# pin); wl1 and wl2 by schedpolicyctl run. The managed parent is made
# here too, as an administrator would, with the CPUs and memory nodes of
# /mnt/cpuset (a new v1 cpuset starts empty).
wl_up() {
	if [ ! -d "$parent/wl3" ]; then
		systemctl stop "$unit"
		use_conf "$base"
		mkdir -p "$parent"
		cat /mnt/cpuset/cpuset.cpus >"$parent/cpuset.cpus"
		cat /mnt/cpuset/cpuset.mems >"$parent/cpuset.mems"
		mkdir "$parent/wl3"
		echo "$last" >"$parent/wl3/cpuset.cpus"
		cat /mnt/cpuset/cpuset.mems >"$parent/wl3/cpuset.mems"
		sleep 1000 >/dev/null 2>&1 &
		echo $! >"$parent/wl3/cgroup.procs"
		systemctl start "$unit"
		wait_until 20 unit_running
		for w in wl1 wl2; do
			schedpolicyctl run --name "$w" -- sleep 1000 >/tmp/$w.log 2>&1 &
		done
	fi
	unit_running || { use_conf "$base" && systemctl start "$unit"; }
}

# --- dpkg -i enables and starts the service ------------------------------------
testcase_install() {
	wait_until 60 sh -c 'systemctl is-system-running | grep -Eq "^(running|degraded)$"' ||
		note "systemd is $(systemctl is-system-running) after 60 s"
	note "guest: $(systemctl --version | head -n 1), cgroup $(stat -fc %T /sys/fs/cgroup), $(nproc) CPUs"
	# systemd at debug level writes every sd_notify message and state change
	# to the journal: that is how the checks see READY=1 and RELOADING=1.
	systemctl log-level debug
	deb=$(ls /mnt/host/schedpolicyd_*.deb)
	c0=$(cursor)
	dbus_monitor_start /tmp/monitor.log
	check "dpkg -i"
	dpkg -i "$deb" >/tmp/dpkg-i.log 2>&1 || fail_now "$(tail -n 5 /tmp/dpkg-i.log)"
	pass "dpkg -i $(basename "$deb")"
	# The configuration every later testcase starts from.
	cp "$conf" "$base"
	printf '\n# systemd-test\ncgroup_root = "%s"\nlog_level = "debug"\n' "$parent" >>"$base"
	check "enabled"
	[ "$(systemctl is-enabled "$unit" 2>&1)" = enabled ] &&
		[ -L /etc/systemd/system/multi-user.target.wants/$unit ] &&
		[ -L /etc/systemd/system/dbus-org.schedpolicyd.SchedPolicy1.service ] ||
		fail_now "is-enabled: $(systemctl is-enabled "$unit" 2>&1)"
	pass "enabled, with its D-Bus alias"
	check "started by the postinst"
	wait_until 20 unit_running || fail_now "$(systemctl is-active "$unit")"
	pass "started by the postinst"
	check "StatusText carries the policy"
	st=$(prop "$unit" StatusText)
	assert_in '^policy performance \(power_aware 1\), power source .*, 0 workloads$' "$st"
	pass "StatusText carries the policy: $st"
	journal_wait "$c0" 10 'Started schedpolicyd.service'
	journal_wait "$c0" 10 'msg="owning bus name"'
	journal_since "$c0" >/tmp/start.log
	check "READY=1 after the bus name was owned"
	bus_order /tmp/monitor.log || fail_now "dbus-monitor: name owned at line '${owned}', unit active at line '${activated}'"
	pass "READY=1 after the bus name was owned (dbus-monitor: NameOwnerChanged at line $owned, unit active at line $activated)"
	check "bus name owner"
	owner=$(bus_owner_pid)
	assert_eq "$owner" "$(main_pid "$unit")"
	pass "the bus name belongs to MainPID $owner"
	excerpt "journal: start" grep -E 'schedpolicyd.*(owning bus name|msg=ready)|schedpolicyd.service: Got notification.*READY=1|Started schedpolicyd' /tmp/start.log

	# The installed binaries, man pages and unit, as a user has them.
	v=$(dpkg-deb -f "$deb" Version)
	check "schedpolicyd version"
	assert_eq "$(schedpolicyd version)" "schedpolicyd $v"
	pass "schedpolicyd version $v"
	check "schedpolicyd probe"
	schedpolicyd probe >/tmp/probe 2>&1 && grep -q '^power source:' /tmp/probe || fail_now "$(cat /tmp/probe)"
	pass "schedpolicyd probe"
	check "schedpolicyctl --help"
	assert_in '^Usage: schedpolicyctl' "$(schedpolicyctl --help 2>&1)"
	pass "schedpolicyctl --help"
	check "man -w"
	man -w schedpolicyctl >/dev/null 2>&1 && man -w 5 schedpolicyd.conf >/dev/null 2>&1 && man -w 8 schedpolicyd >/dev/null 2>&1 ||
		fail_now "a man page is missing"
	pass "man pages found by man -w"
	check "systemd-analyze verify"
	out=$(systemd-analyze verify /lib/systemd/system/$unit 2>&1) && [ -z "$out" ] || fail_now "$out"
	pass "systemd-analyze verify"
}

# --- Workloads in a real cpuset, a switch, a reload, the sandbox -----------------
testcase_cgroupfs() {
	wl_up
	check "workloads managed"
	wait_until 20 three_workloads || fail_now "$(schedpolicyctl workloads 2>&1; cat /tmp/wl1.log /tmp/wl2.log)"
	pass "three workloads managed in $parent (two by schedpolicyctl run, one adopted)"
	schedpolicyctl set performance
	wait_until 10 is_policy performance
	check "performance placement"
	perf=$(wl_check) || fail_now "$perf"
	pass "performance: cpuset.cpus = Cpus_allowed_list = schedpolicyctl:$perf"
	schedpolicyctl set powersaving
	wait_until 10 is_policy powersaving
	wait_until 10 sh -c "[ \"\$(cat $parent/wl1/cpuset.cpus)\" != \"$all\" ]"
	check "powersaving placement"
	save=$(wl_check) || fail_now "$save"
	pass "powersaving: cpuset.cpus = Cpus_allowed_list = schedpolicyctl:$save"
	check "powersaving packs the idle workloads onto one CPU"
	packed=$(for w in wl1 wl2 wl3; do cat "$parent/$w/cpuset.cpus" 2>/dev/null; done | sort | uniq -c | awk '{ print $1 ":" $2 }')
	assert_in '^3:[0-9]{1,2}$' "$packed"
	pass "powersaving packs all three idle workloads onto CPU ${packed#3:}"
	excerpt "placement" sh -c "echo performance:$perf; echo powersaving:$save; schedpolicyctl workloads"
	check "state.json records wl3"
	grep -q "\"path\": \"$parent/wl3\"" "$state" && grep -q "\"original_cpus\": \"$last\"" "$state" || fail_now "$(cat "$state")"
	pass "state.json records wl3's original $last before the writes"

	c1=$(cursor)
	systemctl reload "$unit"
	journal_wait "$c1" 10 'Changed reload -> running'
	journal_wait "$c1" 10 'msg="configuration reloaded"'
	journal_since "$c1" >/tmp/reload.log
	# systemd's own lines, in its order: the daemon said RELOADING=1, then
	# READY=1, and after that the unit went back to running. (With
	# ExecReload=kill, systemd 252 also leaves "reload" when kill exits,
	# which may come first; RELOADING=1 then puts it back into "reload"
	# until READY=1.)
	grep 'systemd\[1\]: schedpolicyd.service: ' /tmp/reload.log >/tmp/reload.pid1
	seq=$(awk '!r && /\(RELOADING=1/ { r = NR } r && !y && NR > r && /\(READY=1/ { y = NR } y && NR > y && /Changed reload -> running/ { print r, y, NR; exit }' /tmp/reload.pid1)
	check "systemctl reload"
	[ -n "$seq" ] && grep -q 'msg="configuration reloaded"' /tmp/reload.log ||
		fail_now "no RELOADING=1 -> READY=1 -> running in systemd's lines, or no 'configuration reloaded'"
	pass "systemctl reload: RELOADING=1, READY=1, back to running (systemd's lines $seq), configuration reloaded"
	check "StatusText after reload"
	assert_in '^policy powersaving \(power_aware 2\), power source .*, 3 workloads$' "$(prop "$unit" StatusText)"
	pass "StatusText after reload: $(prop "$unit" StatusText)"
	excerpt "journal: reload" grep -E 'RELOADING=1|READY=1|configuration reloaded|Changed (reload|running)' /tmp/reload.log

	# A broken file: the reload keeps the running configuration (log_level
	# debug stays on although the new file says "error") and names file:line.
	sed -i 's/^log_level = "debug"$/log_level = "error"/' "$conf"
	printf 'power_aware = "sometimes"\n' >>"$conf"
	bad=$(wc -l <"$conf")
	pid=$(main_pid "$unit")
	c2=$(cursor)
	systemctl reload "$unit"
	journal_wait "$c2" 10 'Changed reload -> running'
	journal_wait "$c2" 10 'keeping the running configuration'
	journal_since "$c2" >/tmp/badreload.log
	cp "$base" "$conf"
	check "broken config on reload"
	grep -q "keeping the running configuration.*$conf:$bad" /tmp/badreload.log ||
		fail_now "no '$conf:$bad' in: $(grep -i 'reload' /tmp/badreload.log | tail -n 3)"
	pass "broken config on reload: kept the running one, journal names $conf:$bad"
	check "running after the broken reload"
	[ "$(main_pid "$unit")" = "$pid" ] && unit_running || fail_now "$(systemctl is-active "$unit")"
	pass "still running as PID $pid after the broken reload"
	excerpt "journal: broken reload" grep -E 'keeping the running|RELOADING=1|READY=1' /tmp/badreload.log

	# The sandbox: the FUSE mount, uevents (cpuset writes and the bus are
	# exercised by every check).
	tree=/run/schedpolicyd/sysfs
	check "FUSE tree"
	[ "$(stat -fc %T $tree 2>/dev/null)" = fuseblk ] || grep -q " $tree fuse" /proc/self/mounts ||
		fail_now "$(grep schedpolicyd /proc/self/mounts)"
	pass "the FUSE tree is mounted in the system's mount namespace ($tree)"
	check "read the tree"
	tp=$(cat $tree/devices/system/cpu/sched_policy/current_sched_policy 2>&1)
	assert_eq "$tp" powersaving
	pass "cat current_sched_policy from outside the unit: $tp"
	# A kernel uevent reaches the daemon's NETLINK_KOBJECT_UEVENT socket:
	# made with a synthetic "change" on a CPU (no state changes), seen in
	# its debug log. The container's /sys is read-only; a private sysfs
	# mount is not.
	mkdir -p /tmp/sysrw
	c3=$(cursor)
	check "uevent"
	if mount -t sysfs sysfs /tmp/sysrw 2>/tmp/mount.err && echo change >/tmp/sysrw/devices/system/cpu/cpu0/uevent; then
		journal_wait "$c3" 10 'msg="kernel uevent" .*action=change .*devpath=/devices/system/cpu/cpu0 .*subsystem=cpu' ||
			fail_now "no 'kernel uevent' debug line within 10 s"
		umount /tmp/sysrw
		pass "a kernel uevent reached the sandboxed daemon (AF_NETLINK allowed)"
	else
		skip "uevent" "cannot make one here: $(cat /tmp/mount.err)"
	fi
}

# --- Watchdog and kill: restarted, cpusets recovered, restored at stop ----------
testcase_watchdog() {
	wl_up
	set_policy powersaving
	# WatchdogSec is 30 s in the unit; a drop-in makes it 4 s so the check
	# takes seconds (the daemon pings at half of whatever WATCHDOG_USEC says).
	mkdir -p /etc/systemd/system/$unit.d
	printf '[Service]\nWatchdogSec=4s\n' >/etc/systemd/system/$unit.d/watchdog.conf
	trap 'rm -f /etc/systemd/system/$unit.d/watchdog.conf; systemctl daemon-reload' EXIT
	systemctl daemon-reload
	systemctl restart "$unit"
	wait_until 20 unit_running
	wait_until 10 three_workloads
	for how in SIGSTOP "systemctl kill -s KILL"; do
		check "$how"
		pid=$(main_pid "$unit") || fail_now "no MainPID"
		n0=$(prop "$unit" NRestarts)
		c4=$(cursor)
		if [ "$how" = SIGSTOP ]; then kill -STOP "$pid"; else systemctl kill -s KILL "$unit"; fi
		wait_until 40 restarted_from "$pid" || fail_now "not restarted within 40 s: $(systemctl is-active "$unit")"
		wait_until 10 three_workloads
		journal_wait "$c4" 10 'original cpuset recovered from saved state'
		[ "$how" = SIGSTOP ] && journal_wait "$c4" 10 'Watchdog timeout'
		journal_since "$c4" >/tmp/wd.log
		n1=$(prop "$unit" NRestarts)
		if [ "$how" = SIGSTOP ]; then
			why=$(grep -c 'Watchdog timeout (limit 4s)' /tmp/wd.log)
			res="Failed with result 'watchdog'"
		else
			why=1
			res="Failed with result 'signal'"
		fi
		[ "$why" -ge 1 ] && grep -q "$res" /tmp/wd.log && [ "$n1" = $((n0 + 1)) ] ||
			fail_now "restarted but the journal lacks '$res' or NRestarts $n0 -> $n1"
		pass "$how: systemd restarted the daemon ($res, PID $pid -> $(main_pid "$unit"), NRestarts $n1)"
		check "$how: recovery"
		rec=$(grep -c 'original cpuset recovered from saved state' /tmp/wd.log)
		after=$(wl_check) && [ "$rec" -ge 3 ] && [ "$(cat $parent/wl3/cpuset.cpus)" != "$last" ] ||
			fail_now "recovered=$rec placement:$after"
		pass "$how: the new daemon recovered $rec originals from state.json and keeps placing:$after"
		excerpt "journal: $how" grep -E 'Watchdog timeout|SIGABRT|Failed with result|Scheduled restart|recovered from saved state|msg=ready' /tmp/wd.log
	done

	# The final stop restores every original, the tasks' affinity with it,
	# and state.json keeps no record.
	systemctl stop "$unit"
	check "stop restores"
	stopped="wl1=$(cat $parent/wl1/cpuset.cpus) wl2=$(cat $parent/wl2/cpuset.cpus) wl3=$(cat $parent/wl3/cpuset.cpus)"
	t3=$(cpus_allowed "$(head -n 1 $parent/wl3/cgroup.procs)")
	[ "$stopped" = "wl1=$all wl2=$all wl3=$last" ] && [ "$t3" = "$last" ] ||
		fail_now "$stopped, wl3's task $t3; want wl1=$all wl2=$all wl3=$last"
	pass "stop restored every original: $stopped (wl3's task: Cpus_allowed_list $t3)"
	# What may stay: the two workloads schedpolicyctl run created, whose
	# tasks still run (a created cgroup is removed once empty; its record
	# waits for that), with nothing of ours left to restore.
	check "state.json after the stop"
	paths=$(sed -n 's/^ *"path": "\(.*\)",$/\1/p' "$state" | tr '\n' ' ')
	[ "$paths" = "$parent/wl1 $parent/wl2 " ] && [ "$(grep -c '"created": true' "$state")" = 2 ] &&
		! grep -q -e '"applied_cpus' -e '"pending_cpus' -e '"sched_load_balance_cleared' "$state" ||
		fail_now "$(cat "$state")"
	pass "state.json after the stop: nothing left to restore (the records of wl1 and wl2, created and still running, wait for their removal)"
}

# --- D-Bus activation -------------------------------------------------------------
testcase_dbus_activation() {
	# The premise: stopped, with powersaving the last choice.
	if unit_running; then
		set_policy powersaving
		systemctl stop "$unit"
	fi
	c5=$(cursor)
	got=$(active_policy)
	# The daemon answers once it owns its name, a moment before READY=1.
	check "D-Bus activation"
	[ "$got" = powersaving ] && wait_until 10 unit_running || fail_now "ActivePolicy '$got', unit $(systemctl is-active "$unit")"
	pass "a property read on $iface started the stopped service (ActivePolicy $got)"
	excerpt "journal: activation" sh -c "journalctl --no-pager --after-cursor='$c5' | grep -E 'Activating via systemd|Successfully activated|Started schedpolicyd'"
}

# --- polkit -----------------------------------------------------------------------
testcase_polkit() {
	systemctl start polkit.service
	user_setup
	set_policy powersaving
	check "polkit refuses a user without a session"
	out=$(setpriv --reuid=sptest --regid=sptest --init-groups dbus-send --system --print-reply \
		--dest=$iface $obj $iface.SetPolicy string:performance 2>&1)
	assert_in 'org\.freedesktop\.DBus\.Error\.AccessDenied.*polkit refused' "$out"
	pass "a user without a session is refused SetPolicy by polkit: $(echo "$out" | head -n 1)"
	check "refused call"
	assert_eq "$(active_policy)" powersaving
	pass "the refused call changed nothing"
	check "root SetPolicy"
	out=$(dbus-send --system --print-reply --dest=$iface $obj $iface.SetPolicy string:performance 2>&1) &&
		wait_until 10 is_policy performance || fail_now "$out"
	pass "root is allowed SetPolicy"

	# The power-profiles API: powerprofilesctl (Debian's) switches the
	# policy. Debian's power-profiles-daemon is masked so it cannot take
	# the names.
	systemctl mask --now power-profiles-daemon.service >/dev/null 2>&1
	use_conf "$base" 'power_profiles_api = true'
	trap 'cp "$base" "$conf"' EXIT
	systemctl restart "$unit"
	wait_until 20 unit_running
	check "powerprofilesctl set power-saver"
	powerprofilesctl set power-saver 2>/tmp/ppc.err && wait_until 10 is_policy powersaving ||
		fail_now "$(cat /tmp/ppc.err) policy $(active_policy)"
	pass "powerprofilesctl set power-saver (root) -> policy powersaving; powerprofilesctl get: $(powerprofilesctl get)"
}

# --- The sandbox as systemd rates it ------------------------------------------------
testcase_security() {
	excerpt "systemd-analyze security $unit" systemd-analyze security --no-pager "$unit"
	check "systemd-analyze security"
	exposure=$(systemd-analyze security --no-pager "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: *//p')
	[ -n "$exposure" ] || fail_now "no overall exposure line"
	pass "systemd-analyze security: $exposure"
}

run_testcases --always install \
	cgroupfs watchdog dbus_activation polkit systemd_manager_client systemd_units slice_rules \
	$surface_testcases \
	laptop_ppd laptop_journal laptop_unclean \
	energy_prefs security \
	--always purge
