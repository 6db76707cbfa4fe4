#!/bin/sh
# container-guest.sh — the checks of `make systemd-test` that run inside the
# nspawn container, with systemd 252 as PID 1, its dbus-daemon and polkitd,
# and the package installed with dpkg -i. container.sh starts it with
# nsenter and collects its "systemd-test:" lines (lib.sh).
#
# The container gives us:
#   /mnt/host    read-only: the .deb, lib.sh, this script
#   /mnt/cpuset  a writable cgroup v1 cpuset directory the host made for
#                this run (the container's own /sys/fs/cgroup is read-only);
#                the daemon manages /mnt/cpuset/schedpolicyd below it.
# Everything written elsewhere goes to the container's volatile overlay.
set -u
. /mnt/host/lib.sh

unit=schedpolicyd.service
conf=/etc/schedpolicyd/schedpolicyd.conf
state=/var/lib/schedpolicyd/state.json
parent=/mnt/cpuset/schedpolicyd
obj=/org/schedpolicyd/SchedPolicy1
iface=org.schedpolicyd.SchedPolicy1
deb=$(ls /mnt/host/schedpolicyd_*.deb)

active_policy() {
	busctl get-property "$iface" "$obj" "$iface" ActivePolicy 2>/dev/null | sed -n 's/^s "\(.*\)"$/\1/p'
}
is_policy() { [ "$(active_policy)" = "$1" ]; }
unit_running() { [ "$(systemctl is-active "$unit")" = active ]; }
# cpus_of NAME: the cpulist schedpolicyctl reports for workload NAME.
cpus_of() { schedpolicyctl workloads | awk -v n="$1" '$1 == n { print $3 }'; }
# allowed PID: the task's Cpus_allowed_list, what the kernel really lets it use.
allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status"; }
# line_of PATTERN FILE: the first line number matching PATTERN, or 0.
line_of() { grep -n -m1 -e "$1" "$2" | cut -d: -f1 | grep . || echo 0; }
restarted_from() {
	np=$(main_pid "$unit") || return 1
	[ "$np" != "$1" ] && unit_running
}

# wl_check LABEL: every workload's cpuset.cpus, its task's Cpus_allowed_list
# and what schedpolicyctl reports agree; prints "name=cpus" pairs.
wl_check() {
	ok=1 seen=""
	for w in wl1 wl2 wl3; do
		file=$(cat "$parent/$w/cpuset.cpus" 2>/dev/null)
		told=$(cpus_of "$w")
		pid=$(head -n 1 "$parent/$w/cgroup.procs" 2>/dev/null)
		task=$([ -n "$pid" ] && allowed "$pid")
		seen="$seen $w=$file"
		if [ -z "$file" ] || [ "$file" != "$told" ] || [ "$file" != "$task" ]; then
			ok=0
			seen="$seen(ctl=$told,task=$task)"
		fi
	done
	echo "$seen"
	[ "$ok" = 1 ]
}

wait_until 60 sh -c 'systemctl is-system-running | grep -Eq "^(running|degraded)$"' ||
	note "systemd is $(systemctl is-system-running) after 60 s"
note "guest: $(systemctl --version | head -n 1), cgroup $(stat -fc %T /sys/fs/cgroup), $(nproc) CPUs"
# systemd at debug level writes every sd_notify message and state change to
# the journal: that is how the checks see READY=1 and RELOADING=1.
systemctl log-level debug

# --- 1. dpkg -i enables and starts the service ------------------------------
c0=$(cursor)
dbus-monitor --system "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='$iface'" \
	"type='signal',path='/org/freedesktop/systemd1/unit/schedpolicyd_2eservice',member='PropertiesChanged'" >/tmp/monitor.log 2>&1 &
mon=$!
wait_until 10 grep -q NameAcquired /tmp/monitor.log
if dpkg -i "$deb" >/tmp/dpkg-i.log 2>&1; then
	pass "dpkg -i $(basename "$deb")"
else
	fail "dpkg -i" "$(tail -n 5 /tmp/dpkg-i.log)"
fi
[ "$(systemctl is-enabled "$unit" 2>&1)" = enabled ] &&
	[ -L /etc/systemd/system/multi-user.target.wants/$unit ] &&
	[ -L /etc/systemd/system/dbus-org.schedpolicyd.SchedPolicy1.service ] &&
	pass "enabled, with its D-Bus alias" ||
	fail "enabled" "is-enabled: $(systemctl is-enabled "$unit" 2>&1)"
if wait_until 20 unit_running; then pass "started by the postinst"; else fail "started by the postinst" "$(systemctl is-active "$unit")"; fi
st=$(prop "$unit" StatusText)
case $st in
"policy performance (power_aware 1), power source "*", 0 workloads") pass "StatusText carries the policy: $st" ;;
*) fail "StatusText carries the policy" "got '$st'" ;;
esac
journal_wait "$c0" 10 'Started schedpolicyd.service'
journal_wait "$c0" 10 'msg="owning bus name"'
journal_since "$c0" >/tmp/start.log
# The order on the bus itself: dbus-monitor sees dbus-daemon's
# NameOwnerChanged for our name and systemd's PropertiesChanged that turns
# the unit "active" (sent once READY=1 arrived) in the order the bus
# handled them. (The journal cannot tell: it files a service's stdout and
# systemd's own messages as they arrive.)
kill "$mon" 2>/dev/null
wait "$mon" 2>/dev/null
owned=$(awk '/member=NameOwnerChanged/ { n = NR } n && NR == n + 1 && /"org.schedpolicyd.SchedPolicy1"/ { o = NR } o && NR == o + 2 && /string ":/ { print NR; exit }' /tmp/monitor.log)
activated=$(awk '/path=\/org\/freedesktop\/systemd1\/unit\/schedpolicyd_2eservice;.*member=PropertiesChanged/ { p = 1 } /^signal|^method/ && !/schedpolicyd_2eservice/ { p = 0 } p && /string "ActiveState"/ { a = NR } p && a && NR == a + 1 && /variant +string "active"/ { print NR; exit }' /tmp/monitor.log)
if [ -n "$owned" ] && [ -n "$activated" ] && [ "$owned" -lt "$activated" ]; then
	pass "READY=1 after the bus name was owned (dbus-monitor: NameOwnerChanged at line $owned, unit active at line $activated)"
else
	fail "READY=1 after the bus name was owned" "dbus-monitor: name owned at line '${owned}', unit active at line '${activated}'"
fi
owner=$(busctl status --no-pager "$iface" 2>/dev/null | sed -n 's/^PID=//p')
[ -n "$owner" ] && [ "$owner" = "$(main_pid "$unit")" ] &&
	pass "the bus name belongs to MainPID $owner" ||
	fail "bus name owner" "owner PID '$owner', MainPID '$(main_pid "$unit")'"
excerpt "journal: start" grep -E 'schedpolicyd.*(owning bus name|msg=ready)|schedpolicyd.service: Got notification.*READY=1|Started schedpolicyd' /tmp/start.log

# The installed binaries, man pages and unit, as a user has them.
v=$(dpkg-deb -f "$deb" Version)
[ "$(schedpolicyd version)" = "schedpolicyd $v" ] && pass "schedpolicyd version $v" || fail "schedpolicyd version" "$(schedpolicyd version 2>&1)"
schedpolicyd probe >/tmp/probe 2>&1 && grep -q '^power source:' /tmp/probe && pass "schedpolicyd probe" || fail "schedpolicyd probe" "$(cat /tmp/probe)"
schedpolicyctl --help | grep -q '^Usage: schedpolicyctl' && pass "schedpolicyctl --help" || fail "schedpolicyctl --help" "no usage line"
man -w schedpolicyctl >/dev/null 2>&1 && man -w 5 schedpolicyd.conf >/dev/null 2>&1 && man -w 8 schedpolicyd >/dev/null 2>&1 &&
	pass "man pages found by man -w" || fail "man -w" "a man page is missing"
out=$(systemd-analyze verify /lib/systemd/system/$unit 2>&1) && [ -z "$out" ] &&
	pass "systemd-analyze verify" || fail "systemd-analyze verify" "$out"

# --- 2. Workloads in a real cpuset, a switch, a reload ----------------------
# wl3 is made by hand with its own cpuset (the last CPU): its original
# differs from anything the balancer writes, so only a real restore brings
# it back.
all=$(cat /mnt/cpuset/cpuset.cpus)
last=$(cat /mnt/cpuset/cpuset.effective_cpus | tr ',' '\n' | tail -n 1 | sed 's/.*-//')
# wl3 is made while the daemon is stopped, so that its cpuset is what the
# daemon finds (made while it runs, the write would be a user's pin).
printf '\n# systemd-test\ncgroup_root = "%s"\nlog_level = "debug"\n' "$parent" >>"$conf"
# The managed parent is made here too, as an administrator would, with
# the CPUs and memory nodes of /mnt/cpuset (a new v1 cpuset starts empty).
systemctl stop "$unit"
mkdir "$parent"
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
if wait_until 20 sh -c "schedpolicyctl workloads | grep -c '^wl[123] ' | grep -qx 3"; then
	pass "three workloads managed in $parent (two by schedpolicyctl run, one adopted)"
else
	fail "workloads managed" "$(schedpolicyctl workloads 2>&1; cat /tmp/wl1.log /tmp/wl2.log)"
fi
schedpolicyctl set performance
wait_until 10 is_policy performance
perf=$(wl_check) && pass "performance: cpuset.cpus = Cpus_allowed_list = schedpolicyctl:$perf" ||
	fail "performance placement" "$perf"
schedpolicyctl set powersaving
wait_until 10 is_policy powersaving
wait_until 10 sh -c "[ \"\$(cat $parent/wl1/cpuset.cpus)\" != \"$all\" ]"
save=$(wl_check) && pass "powersaving: cpuset.cpus = Cpus_allowed_list = schedpolicyctl:$save" ||
	fail "powersaving placement" "$save"
packed=$(for w in wl1 wl2 wl3; do cat "$parent/$w/cpuset.cpus" 2>/dev/null; done | sort | uniq -c | awk '{ print $1 ":" $2 }')
case $packed in
3:[0-9] | 3:[0-9][0-9]) pass "powersaving packs all three idle workloads onto CPU ${packed#3:}" ;;
*) fail "powersaving packs the idle workloads onto one CPU" "$save" ;;
esac
excerpt "placement" sh -c "echo performance:$perf; echo powersaving:$save; schedpolicyctl workloads"
grep -q "\"path\": \"$parent/wl3\"" "$state" && grep -q "\"original_cpus\": \"$last\"" "$state" &&
	pass "state.json records wl3's original $last before the writes" ||
	fail "state.json records wl3" "$(cat "$state")"

c1=$(cursor)
systemctl reload "$unit"
journal_wait "$c1" 10 'Changed reload -> running'
journal_wait "$c1" 10 'msg="configuration reloaded"'
journal_since "$c1" >/tmp/reload.log
# systemd's own lines, in its order: the daemon said RELOADING=1, then
# READY=1, and after that the unit went back to running. (With
# ExecReload=kill, systemd 252 also leaves "reload" when kill exits, which
# may come first; RELOADING=1 then puts it back into "reload" until READY=1.)
grep 'systemd\[1\]: schedpolicyd.service: ' /tmp/reload.log >/tmp/reload.pid1
seq=$(awk '!r && /\(RELOADING=1/ { r = NR } r && !y && NR > r && /\(READY=1/ { y = NR } y && NR > y && /Changed reload -> running/ { print r, y, NR; exit }' /tmp/reload.pid1)
if [ -n "$seq" ] && grep -q 'msg="configuration reloaded"' /tmp/reload.log; then
	pass "systemctl reload: RELOADING=1, READY=1, back to running (systemd's lines $seq), configuration reloaded"
else
	fail "systemctl reload" "no RELOADING=1 -> READY=1 -> running in systemd's lines, or no 'configuration reloaded'"
fi
case $(prop "$unit" StatusText) in
"policy powersaving (power_aware 2), power source "*", 3 workloads") pass "StatusText after reload: $(prop "$unit" StatusText)" ;;
*) fail "StatusText after reload" "got '$(prop "$unit" StatusText)'" ;;
esac
excerpt "journal: reload" grep -E 'RELOADING=1|READY=1|configuration reloaded|Changed (reload|running)' /tmp/reload.log

# A broken file: the reload keeps the running configuration (log_level
# debug stays on although the new file says "error") and names file:line.
cp "$conf" /tmp/conf.good
sed -i 's/^log_level = "debug"$/log_level = "error"/' "$conf"
printf 'power_aware = "sometimes"\n' >>"$conf"
bad=$(wc -l <"$conf")
pid=$(main_pid "$unit")
c2=$(cursor)
systemctl reload "$unit"
journal_wait "$c2" 10 'Changed reload -> running'
journal_wait "$c2" 10 'keeping the running configuration'
journal_since "$c2" >/tmp/badreload.log
if grep -q "keeping the running configuration.*$conf:$bad" /tmp/badreload.log; then
	pass "broken config on reload: kept the running one, journal names $conf:$bad"
else
	fail "broken config on reload" "no '$conf:$bad' in: $(grep -i 'reload' /tmp/badreload.log | tail -n 3)"
fi
[ "$(main_pid "$unit")" = "$pid" ] && unit_running && pass "still running as PID $pid after the broken reload" ||
	fail "running after the broken reload" "$(systemctl is-active "$unit")"
excerpt "journal: broken reload" grep -E 'keeping the running|RELOADING=1|READY=1' /tmp/badreload.log
cp /tmp/conf.good "$conf"

# --- 3. The sandbox: FUSE mount, uevents, cpuset writes, the bus ------------
tree=/run/schedpolicyd/sysfs
if [ "$(stat -fc %T $tree 2>/dev/null)" = fuseblk ] || grep -q " $tree fuse" /proc/self/mounts; then
	pass "the FUSE tree is mounted in the system's mount namespace ($tree)"
else
	fail "FUSE tree" "$(grep schedpolicyd /proc/self/mounts)"
fi
tp=$(cat $tree/devices/system/cpu/sched_policy/current_sched_policy 2>&1)
[ "$tp" = powersaving ] && pass "cat current_sched_policy from outside the unit: $tp" || fail "read the tree" "$tp"
# A kernel uevent reaches the daemon's NETLINK_KOBJECT_UEVENT socket: made
# with a synthetic "change" on a CPU (no state changes), seen in its debug
# log. The container's /sys is read-only; a private sysfs mount is not.
mkdir -p /tmp/sysrw
c3=$(cursor)
if mount -t sysfs sysfs /tmp/sysrw 2>/tmp/mount.err && echo change >/tmp/sysrw/devices/system/cpu/cpu0/uevent; then
	if journal_wait "$c3" 10 'msg="kernel uevent" .*action=change .*devpath=/devices/system/cpu/cpu0 .*subsystem=cpu'; then
		pass "a kernel uevent reached the sandboxed daemon (AF_NETLINK allowed)"
	else
		fail "uevent" "no 'kernel uevent' debug line within 10 s"
	fi
	umount /tmp/sysrw
else
	skip "uevent" "cannot make one here: $(cat /tmp/mount.err)"
fi
# (cpuset writes and the bus are exercised by every check above and below.)

# --- 4. Watchdog and kill: restarted, cpusets recovered, restored at stop ---
# WatchdogSec is 30 s in the unit; a drop-in makes it 4 s so the check
# takes seconds (the daemon pings at half of whatever WATCHDOG_USEC says).
mkdir -p /etc/systemd/system/$unit.d
printf '[Service]\nWatchdogSec=4s\n' >/etc/systemd/system/$unit.d/watchdog.conf
systemctl daemon-reload
systemctl restart "$unit"
wait_until 20 unit_running
wait_until 10 sh -c "schedpolicyctl workloads | grep -c '^wl[123] ' | grep -qx 3"
for how in SIGSTOP "systemctl kill -s KILL"; do
	pid=$(main_pid "$unit") || { fail "$how" "no MainPID"; continue; }
	n0=$(prop "$unit" NRestarts)
	c4=$(cursor)
	if [ "$how" = SIGSTOP ]; then kill -STOP "$pid"; else systemctl kill -s KILL "$unit"; fi
	if wait_until 40 restarted_from "$pid"; then
		wait_until 10 sh -c "schedpolicyctl workloads | grep -c '^wl[123] ' | grep -qx 3"
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
		if [ "$why" -ge 1 ] && grep -q "$res" /tmp/wd.log && [ "$n1" = $((n0 + 1)) ]; then
			pass "$how: systemd restarted the daemon ($res, PID $pid -> $(main_pid "$unit"), NRestarts $n1)"
		else
			fail "$how" "restarted but the journal lacks '$res' or NRestarts $n0 -> $n1"
		fi
	else
		fail "$how" "not restarted within 40 s: $(systemctl is-active "$unit")"
		continue
	fi
	rec=$(grep -c 'original cpuset recovered from saved state' /tmp/wd.log)
	after=$(wl_check) && [ "$rec" -ge 3 ] && [ "$(cat $parent/wl3/cpuset.cpus)" != "$last" ] &&
		pass "$how: the new daemon recovered $rec originals from state.json and keeps placing:$after" ||
		fail "$how: recovery" "recovered=$rec placement:$after"
	excerpt "journal: $how" grep -E 'Watchdog timeout|SIGABRT|Failed with result|Scheduled restart|recovered from saved state|msg=ready' /tmp/wd.log
done
rm -f /etc/systemd/system/$unit.d/watchdog.conf
systemctl daemon-reload

# The final stop restores every original, the tasks' affinity with it, and
# state.json keeps no record.
systemctl stop "$unit"
stopped="wl1=$(cat $parent/wl1/cpuset.cpus) wl2=$(cat $parent/wl2/cpuset.cpus) wl3=$(cat $parent/wl3/cpuset.cpus)"
t3=$(allowed "$(head -n 1 $parent/wl3/cgroup.procs)")
if [ "$stopped" = "wl1=$all wl2=$all wl3=$last" ] && [ "$t3" = "$last" ]; then
	pass "stop restored every original: $stopped (wl3's task: Cpus_allowed_list $t3)"
else
	fail "stop restores" "$stopped, wl3's task $t3; want wl1=$all wl2=$all wl3=$last"
fi
# What may stay: the two workloads schedpolicyctl run created, whose tasks
# still run (a created cgroup is removed once empty; its record waits for
# that), with nothing of ours left to restore.
paths=$(sed -n 's/^ *"path": "\(.*\)",$/\1/p' "$state" | tr '\n' ' ')
if [ "$paths" = "$parent/wl1 $parent/wl2 " ] && [ "$(grep -c '"created": true' "$state")" = 2 ] &&
	! grep -q -e '"applied_cpus' -e '"pending_cpus' -e '"sched_load_balance_cleared' "$state"; then
	pass "state.json after the stop: nothing left to restore (the records of wl1 and wl2, created and still running, wait for their removal)"
else
	fail "state.json after the stop" "$(cat "$state")"
fi

# --- 5. D-Bus activation -----------------------------------------------------
c5=$(cursor)
got=$(active_policy)
# The daemon answers once it owns its name, a moment before READY=1.
if [ "$got" = powersaving ] && wait_until 10 unit_running; then
	pass "a property read on $iface started the stopped service (ActivePolicy $got)"
else
	fail "D-Bus activation" "ActivePolicy '$got', unit $(systemctl is-active "$unit")"
fi
excerpt "journal: activation" sh -c "journalctl --no-pager --after-cursor='$c5' | grep -E 'Activating via systemd|Successfully activated|Started schedpolicyd'"

# --- 6. polkit ---------------------------------------------------------------
systemctl start polkit.service
useradd -m -s /bin/sh sptest 2>/dev/null || true
out=$(setpriv --reuid=sptest --regid=sptest --init-groups dbus-send --system --print-reply \
	--dest=$iface $obj $iface.SetPolicy string:performance 2>&1)
case $out in
*"org.freedesktop.DBus.Error.AccessDenied"*"polkit refused"*) pass "a user without a session is refused SetPolicy by polkit: $(echo "$out" | head -n 1)" ;;
*) fail "polkit refuses a user without a session" "$out" ;;
esac
is_policy powersaving && pass "the refused call changed nothing" || fail "refused call" "policy is $(active_policy)"
out=$(dbus-send --system --print-reply --dest=$iface $obj $iface.SetPolicy string:performance 2>&1) &&
	wait_until 10 is_policy performance &&
	pass "root is allowed SetPolicy" || fail "root SetPolicy" "$out"

# The power-profiles API: powerprofilesctl (Debian's) switches the policy.
# Debian's power-profiles-daemon is masked so it cannot take the names.
systemctl mask --now power-profiles-daemon.service >/dev/null 2>&1
printf 'power_profiles_api = true\n' >>"$conf"
systemctl restart "$unit"
wait_until 20 unit_running
if powerprofilesctl set power-saver 2>/tmp/ppc.err && wait_until 10 is_policy powersaving; then
	pass "powerprofilesctl set power-saver (root) -> policy powersaving; powerprofilesctl get: $(powerprofilesctl get)"
else
	fail "powerprofilesctl set power-saver" "$(cat /tmp/ppc.err) policy $(active_policy)"
fi
cp /tmp/conf.good "$conf"

# --- 6b. The systemd manager client, against this systemd ------------------
# systemd/manager_test.go: transient scopes, SliceUnits, UnitNew and
# UnitRemoved, AllowedCPUs set and reset, on the system manager and, as
# root through its private socket, on a lingering user's manager.
if [ -x /mnt/host/systemd.test ]; then
	loginctl enable-linger sptest
	uid=$(id -u sptest)
	if wait_until 30 test -S "/run/user/$uid/systemd/private"; then
		gotest /mnt/host/systemd.test 'TestManager|TestLogind' SCHEDPOLICYD_TEST_SYSTEMD=1 SCHEDPOLICYD_TEST_USER_UID="$uid"
	else
		fail "user manager for sptest" "no /run/user/$uid/systemd/private after enable-linger: $(systemctl status "user@$uid.service" 2>&1 | tail -n 5)"
	fi
else
	skip "go test ./systemd/ -run TestManager" "no test binary in /mnt/host (container.sh --file)"
fi

# --- 6c. placement = "systemd": units placed through systemd's API ---------
# On cgroup v1 systemd stores AllowedCPUs= and applies nothing, so what is
# asserted here is what systemd reports (systemctl show -p AllowedCPUs) for
# every placement, switch and reset; the VM checks the applied cpusets.
# sc and ucpus: lib.sh.
# units_agree: every unit of ours is listed, and what schedpolicyctl
# reports is its AllowedCPUs (every CPU while it is unset).
units_agree() {
	for n in spsvc1.service spsvc2.service wlu.scope; do
		schedpolicyctl workloads | grep -q "^$n " || return 1
		want=$(sc "$n")
		[ -n "$want" ] || want=$all
		[ "$want" = "$(ucpus "$n")" ] || return 1
	done
}
cp /tmp/conf.good "$conf"
printf 'placement = "systemd"\nmanage = ["schedpolicyd.slice", "system.slice", "app.slice"]\n' >>"$conf"
um=user@$(id -u sptest).service
before=$(for n in $(systemctl list-units --plain --no-legend --type=service,scope --state=active | awk '{ print $1 }'); do
	[ "$(systemctl show -p Slice --value "$n")" = system.slice ] && echo "$n=$(sc "$n")"
done)
c6=$(cursor)
systemctl restart "$unit"
wait_until 20 unit_running
if journal_wait "$c6" 10 'msg="managing units through systemd"'; then
	pass "placement = \"systemd\": the daemon manages units through systemd ($(journalctl --no-pager --after-cursor="$c6" | grep -o 'slices=[^ ]*' | head -n 1))"
else
	fail "placement systemd" "no 'managing units through systemd' in the journal"
fi
systemd-run --quiet --unit=spsvc1 --slice=schedpolicyd.slice sleep 1000
systemd-run --quiet --unit=spsvc2 --slice=schedpolicyd.slice -p AllowedCPUs="$last" sleep 1000
schedpolicyctl run --name wlu -- sleep 1000 >/tmp/wlu.log 2>&1 &
if wait_until 20 sh -c 'for n in spsvc1.service spsvc2.service wlu.scope; do schedpolicyctl workloads | grep -q "^$n " || exit 1; done'; then
	pass "units adopted from systemd's signals: spsvc1.service, spsvc2.service (AllowedCPUs=$last by its admin), wlu.scope (schedpolicyctl run)"
else
	fail "units adopted" "$(schedpolicyctl workloads 2>&1; cat /tmp/wlu.log)"
fi
[ "$(systemctl show -p Slice --value wlu.scope)" = schedpolicyd.slice ] && [ "$(systemctl show -p ControlGroup --value wlu.scope)" = /schedpolicyd.slice/wlu.scope ] &&
	pass "schedpolicyctl run started transient scope wlu.scope in schedpolicyd.slice" ||
	fail "schedpolicyctl run scope" "Slice=$(systemctl show -p Slice --value wlu.scope) ControlGroup=$(systemctl show -p ControlGroup --value wlu.scope)"
if wait_until 10 sh -c "schedpolicyctl workloads | awk '\$1 == \"$um\" && \$2 == \"user\"' | grep -q ." ; then
	pass "app.slice in manage: $um (the lingering user's manager) is a workload of class user"
else
	fail "user manager adopted" "$(schedpolicyctl workloads)"
fi
excerpt "units before the switch" sh -c 'for n in spsvc1.service spsvc2.service wlu.scope; do echo "$n AllowedCPUs=$(systemctl show -p AllowedCPUs --value $n)"; done; schedpolicyctl workloads'
schedpolicyctl set powersaving
wait_until 10 is_policy powersaving
if wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spsvc1.service)" ]' && units_agree; then
	s1=$(sc spsvc1.service) s2=$(sc spsvc2.service) s3=$(sc wlu.scope)
	case "$s1,$s3" in
	*[-,]*,* | *,*[-,]*) fail "powersaving packs the units" "spsvc1=$s1 wlu=$s3" ;;
	*) [ "$s2" = "$last" ] && pass "powersaving: AllowedCPUs spsvc1=$s1 wlu.scope=$s3 (packed), spsvc2=$s2 (its admin's value bounds it); systemctl show = schedpolicyctl" ||
		fail "the admin's AllowedCPUs bounds the choice" "spsvc2=$s2, want $last" ;;
	esac
else
	fail "powersaving AllowedCPUs" "$(for n in spsvc1.service spsvc2.service wlu.scope; do echo "$n show=$(sc $n) ctl=$(ucpus $n)"; done)"
fi
schedpolicyctl set performance
wait_until 10 is_policy performance
if wait_until 10 sh -c '[ -z "$(systemctl show -p AllowedCPUs --value spsvc1.service)" ]' && [ -z "$(sc wlu.scope)" ] && [ "$(sc spsvc2.service)" = "$last" ] && units_agree; then
	pass "performance: AllowedCPUs reset to the originals (spsvc1 and wlu.scope unset, spsvc2 $last)"
else
	fail "performance resets AllowedCPUs" "spsvc1=$(sc spsvc1.service) wlu=$(sc wlu.scope) spsvc2=$(sc spsvc2.service)"
fi
schedpolicyctl set powersaving
wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spsvc1.service)" ]'
grep -q '"unit": "spsvc1.service"' "$state" && grep -q '"applied_cpus"' "$state" &&
	pass "state.json records the units' originals and the values set" || fail "unit records" "$(cat "$state")"
[ -n "$(sc "$um")" ] && [ "$(sc "$um")" = "$(ucpus "$um")" ] &&
	pass "powersaving: $um AllowedCPUs=$(sc "$um"), set on the system manager's unit" ||
	fail "user manager placed" "AllowedCPUs=$(sc "$um") schedpolicyctl=$(ucpus "$um")"
excerpt "units under powersaving" sh -c 'for n in spsvc1.service spsvc2.service wlu.scope; do echo "$n AllowedCPUs=$(systemctl show -p AllowedCPUs --value $n)"; done; schedpolicyctl workloads'
# kill -9: the next start recovers the records and keeps placing.
pid=$(main_pid "$unit")
c7=$(cursor)
systemctl kill -s KILL "$unit"
if wait_until 40 restarted_from "$pid" && journal_wait "$c7" 10 'original AllowedCPUs recovered from saved state.*spsvc1.service'; then
	pass "kill -9 and restart: the new daemon recovered the units' originals from state.json (AllowedCPUs spsvc1=$(sc spsvc1.service) kept)"
else
	fail "recovery after kill -9" "$(journalctl --no-pager --after-cursor="$c7" | grep -i 'unit\|recover' | tail -n 5)"
fi
excerpt "journal: units after kill -9" sh -c "journalctl --no-pager --after-cursor='$c7' | grep -E 'recovered from saved state|managing units|adopted unit'"
# A value someone else sets is theirs: kept, never overwritten or reset.
systemctl set-property --runtime wlu.scope AllowedCPUs="$last"
c9=$(cursor)
schedpolicyctl set performance
wait_until 10 is_policy performance
if journal_wait "$c9" 10 'AllowedCPUs was changed by someone else.*unit=wlu.scope' && [ "$(sc wlu.scope)" = "$last" ]; then
	pass "an AllowedCPUs set by hand (wlu.scope=$last) is kept as the unit's original across a switch"
else
	fail "a value set by hand is kept" "wlu.scope AllowedCPUs=$(sc wlu.scope); $(journalctl --no-pager --after-cursor="$c9" | grep -i 'someone else' | tail -n 2)"
fi
schedpolicyctl set powersaving
wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spsvc1.service)" ]'
# A unit that stops is forgotten.
c8=$(cursor)
systemctl stop spsvc1.service
if journal_wait "$c8" 10 'msg="unit gone".*unit=spsvc1.service' && ! schedpolicyctl workloads | grep -q '^spsvc1.service '; then
	pass "a stopped unit is forgotten (journal: unit gone)"
else
	fail "stopped unit forgotten" "$(schedpolicyctl workloads)"
fi
# The final stop resets exactly what the daemon set.
systemctl stop "$unit"
after=$(for n in $(echo "$before" | cut -d= -f1); do echo "$n=$(sc "$n")"; done)
if [ "$(sc wlu.scope)" = "$last" ] && [ "$(sc spsvc2.service)" = "$last" ] && [ -z "$(sc spsvc1.service)" ] && [ -z "$(sc "$um")" ] && [ "$before" = "$after" ]; then
	pass "stop reset every AllowedCPUs to its original (the stopped spsvc1 and $um unset; spsvc2 and, set by hand, wlu.scope $last; system.slice's $(echo "$before" | wc -l) units as found)"
else
	fail "stop resets AllowedCPUs" "wlu=$(sc wlu.scope) spsvc1=$(sc spsvc1.service) spsvc2=$(sc spsvc2.service) $um=$(sc "$um"); system.slice before: $before after: $after"
fi
excerpt "units after the stop" sh -c 'for n in spsvc1.service spsvc2.service wlu.scope; do echo "$n AllowedCPUs=$(systemctl show -p AllowedCPUs --value $n)"; done'
grep -q '"applied_cpus"\|"pending_cpus"' "$state" && fail "unit records after the stop" "$(cat "$state")" ||
	pass "state.json holds no value of ours after the stop"
systemctl stop spsvc2.service wlu.scope 2>/dev/null
cp /tmp/conf.good "$conf"
systemctl start "$unit"

# --- 6d. [[slice]] rules: a slice packed harder than another ---------------
# spbg.slice has a rule "powersaving, always": under performance its unit
# is packed while schedpolicyd.slice's stays unset; a reload drops
# "always" and the unit is unset again; a rule for an unmanaged slice is
# refused with its line and changes nothing; the stop resets both units.
slice_conf() {
	cp /tmp/conf.good "$conf"
	printf 'placement = "systemd"\nmanage = ["schedpolicyd.slice", "spbg.slice"]\n\n[[slice]]\nname = "spbg.slice"\npolicy = "powersaving"\n%b' "$1" >>"$conf"
}
# class_of NAME: the CLASS column schedpolicyctl shows for unit NAME.
class_of() { schedpolicyctl workloads | awk -v n="$1" '$1 == n { print $2 }'; }
one_cpu() { [ -n "$1" ] && [ "$(echo "$1" | tr -cd ',-')" = "" ]; }
slice_conf 'always = true\n'
systemctl restart "$unit"
wait_until 20 unit_running
schedpolicyctl set performance >/dev/null
systemd-run --quiet --unit=spbg1 --slice=spbg.slice sleep 1000
systemd-run --quiet --unit=spw1 --slice=schedpolicyd.slice sleep 1000
if wait_until 20 sh -c 'for n in spbg1.service spw1.service; do schedpolicyctl workloads | grep -q "^$n " || exit 1; done'; then
	pass "units of spbg.slice and schedpolicyd.slice adopted; classes spbg1=$(class_of spbg1.service) spw1=$(class_of spw1.service)"
else
	fail "slice units adopted" "$(schedpolicyctl workloads 2>&1)"
fi
[ "$(class_of spbg1.service)" = spbg ] && [ "$(class_of spw1.service)" = workload ] ||
	fail "classes" "spbg1=$(class_of spbg1.service) spw1=$(class_of spw1.service), want spbg and workload"
wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spbg1.service)" ]'
b=$(sc spbg1.service) w=$(sc spw1.service)
if is_policy performance && one_cpu "$b" && [ -z "$w" ] && [ "$b" = "$(ucpus spbg1.service)" ] && [ "$all" = "$(ucpus spw1.service)" ]; then
	pass "performance with [[slice]] spbg.slice powersaving always: AllowedCPUs spbg1=$b (packed), spw1 unset; systemctl show = schedpolicyctl"
else
	fail "slice rule with always under performance" "policy $(active_policy) spbg1=$b (ctl $(ucpus spbg1.service)) spw1=$w (ctl $(ucpus spw1.service))"
fi
excerpt "units with the slice rule, under performance" sh -c 'for n in spbg1.service spw1.service; do echo "$n AllowedCPUs=$(systemctl show -p AllowedCPUs --value $n)"; done; schedpolicyctl workloads'
schedpolicyctl set powersaving >/dev/null
wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spw1.service)" ]'
b=$(sc spbg1.service) w=$(sc spw1.service)
one_cpu "$b" && one_cpu "$w" && [ "$w" = "$(ucpus spw1.service)" ] &&
	pass "powersaving: both packed (AllowedCPUs spbg1=$b spw1=$w)" ||
	fail "powersaving with a slice rule" "spbg1=$b spw1=$w (ctl $(ucpus spw1.service))"
# A reload without "always": under performance the rule no longer applies.
schedpolicyctl set performance >/dev/null
slice_conf ''
c10=$(cursor)
systemctl reload "$unit"
if journal_wait "$c10" 10 'msg="configuration reloaded"' && wait_until 10 sh -c '[ -z "$(systemctl show -p AllowedCPUs --value spbg1.service)" ]' && [ -z "$(sc spw1.service)" ]; then
	pass "systemctl reload without always: spbg1 unset again under performance ($(journalctl --no-pager --after-cursor="$c10" | grep -o 'msg="reload: slice rules changed" slices="[^"]*"' | head -n 1))"
else
	fail "reload of a slice rule" "spbg1=$(sc spbg1.service) spw1=$(sc spw1.service); $(journalctl --no-pager --after-cursor="$c10" | grep -i reload | tail -n 3)"
fi
# A rule for a slice that is not managed: refused, the running rules stay.
slice_conf 'always = true\n[[slice]]\nname = "nope.slice"\npolicy = "balance"\n'
bad=$(line_of 'name = "nope.slice"' "$conf")
c11=$(cursor)
systemctl reload "$unit"
if journal_wait "$c11" 10 "keeping the running configuration.*$conf:$bad: slice.name: .*not in manage" && [ -z "$(sc spbg1.service)" ]; then
	pass "a [[slice]] for an unmanaged slice is refused ($conf:$bad in the journal); spbg1 stays unset"
else
	fail "bad slice rule on reload" "spbg1=$(sc spbg1.service); $(journalctl --no-pager --after-cursor="$c11" | grep -i 'reload\|slice' | tail -n 3)"
fi
schedpolicyctl set powersaving >/dev/null
wait_until 10 sh -c '[ -n "$(systemctl show -p AllowedCPUs --value spbg1.service)" ]'
systemctl stop "$unit"
if [ -z "$(sc spbg1.service)" ] && [ -z "$(sc spw1.service)" ] && ! grep -q '"applied_cpus"\|"pending_cpus"' "$state"; then
	pass "stop reset spbg1 and spw1 to unset; state.json holds no value of ours"
else
	fail "stop resets the slice units" "spbg1=$(sc spbg1.service) spw1=$(sc spw1.service) $(cat "$state")"
fi
systemctl stop spbg1.service spw1.service 2>/dev/null
cp /tmp/conf.good "$conf"
systemctl start "$unit"

# --- 6e. The systemd surface, live (surface.sh) ------------------------------
# What an administrator does every day to units the daemon places, each
# with a kill -9 of the daemon in its middle; AllowedCPUs= as systemd
# reports it (v1 applies nothing: the VM checks the tasks).
. /mnt/host/surface.sh
surface_all /tmp/conf.good
systemctl start "$unit"

# --- 6f. The laptop issue (laptop.sh) ----------------------------------------
# power_profiles_api = "auto" beside Debian's power-profiles-daemon:
# started, restarted, stopped and started, killed; masked and unmasked.
# journalctl -p warning and the daemon's priorities.
. /mnt/host/laptop.sh
laptop_begin /tmp/conf.good
laptop_ppd
laptop_journal
laptop_unclean

# --- 7. The sandbox as systemd rates it --------------------------------------
excerpt "systemd-analyze security $unit" systemd-analyze security --no-pager "$unit"
exposure=$(systemd-analyze security --no-pager "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: *//p')
[ -n "$exposure" ] && pass "systemd-analyze security: $exposure" || fail "systemd-analyze security" "no overall exposure line"

# --- 8. dpkg --purge leaves nothing -----------------------------------------
for w in wl1 wl2 wl3; do
	for p in $(cat $parent/$w/cgroup.procs 2>/dev/null); do kill "$p"; done
done
wait_until 10 sh -c "! cat $parent/wl*/cgroup.procs 2>/dev/null | grep -q ."
files=$(dpkg -L schedpolicyd)
if dpkg --purge schedpolicyd >/tmp/purge.log 2>&1; then pass "dpkg --purge"; else fail "dpkg --purge" "$(tail -n 5 /tmp/purge.log)"; fi
left=""
for f in $files; do
	case $f in
	*schedpolicyd* | *schedpolicyctl*) ;;
	*) [ -d "$f" ] && continue ;;
	esac
	{ [ -e "$f" ] || [ -L "$f" ]; } && left="$left $f"
done
for f in /etc/schedpolicyd /var/lib/schedpolicyd /run/schedpolicyd \
	/etc/systemd/system/multi-user.target.wants/$unit \
	/etc/systemd/system/dbus-org.schedpolicyd.SchedPolicy1.service \
	/var/lib/systemd/deb-systemd-helper-enabled/$unit.dsh-also \
	/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/$unit \
	/var/lib/systemd/deb-systemd-helper-masked/$unit; do
	{ [ -e "$f" ] || [ -L "$f" ]; } && left="$left $f"
done
dpkg-query -W -f '${Status}' schedpolicyd 2>/dev/null | grep -q installed && left="$left (dpkg still knows it)"
pgrep -x schedpolicyd >/dev/null && left="$left (a schedpolicyd process)"
awk '$3 ~ /^fuse/ && $2 ~ /schedpolicyd/' /proc/self/mounts | grep -q . && left="$left (the FUSE mount)"
[ -z "$left" ] && pass "nothing left after the purge" || fail "left after the purge" "$left"

done_checks
