# placement.sh — the scenarios both guests run the same way, written once:
# the systemd manager client's Go tests, units placed through systemd's
# API, [[slice]] rules, the purge. On
# cgroup v1 (the container) systemd stores AllowedCPUs= and applies
# nothing, so a unit's placement is asserted on what systemd and
# schedpolicyctl report; on v2 (the VM) also on its cgroup's
# cpuset.cpus.effective and its task's Cpus_allowed_list (units_ok).
#
# Sourced after lib.sh by container-guest.sh and vm-guest.sh, which set
# all (every CPU), last (the last CPU) and base (the configuration file the
# testcases start from), and define units_conf LINE... (base plus what
# placing units through systemd needs there, then LINE...). Where the two
# guests name the same check differently (their logs predate this file),
# v1v2 gives each its own name.

# v1v2 V1 V2: V1 in the container (cgroup v1), V2 in the VM.
v1v2() { if [ "$v2" = 1 ]; then echo "$2"; else echo "$1"; fi; }

# --- The systemd manager client, against this systemd --------------------------
# systemd/manager_test.go (the static test binary beside this script):
# transient scopes, SliceUnits, UnitNew and UnitRemoved, AllowedCPUs set
# and reset, on the system manager and, as root through its private
# socket, on a lingering user's manager; on v2 also each scope's
# cpuset.cpus.effective and its task's Cpus_allowed_list.
testcase_systemd_manager_client() {
	if [ ! -x /mnt/host/systemd.test ]; then
		skip "go test ./systemd/ -run TestManager" "no test binary in /mnt/host (container.sh --file, vm.sh FILES)"
		return
	fi
	check "user manager for sptest"
	user_linger 60 || fail_now "no /run/user/$uid/systemd/private after enable-linger: $(systemctl status "$um" 2>&1 | tail -n 5)"
	gotest /mnt/host/systemd.test 'TestManager|TestLogind' SCHEDPOLICYD_TEST_SYSTEMD=1 SCHEDPOLICYD_TEST_USER_UID="$uid"
}

# --- Units of schedpolicyd.slice placed through systemd ---------------------------
# units_start: spsvc1, spsvc2 with an administrator's AllowedCPUs= of the
# last CPU, and the scope wlu.scope from schedpolicyctl run.
units_start() {
	systemd-run --quiet --unit=spsvc1 --slice=schedpolicyd.slice sleep 1000
	systemd-run --quiet --unit=spsvc2 --slice=schedpolicyd.slice -p AllowedCPUs="$last" sleep 1000
	schedpolicyctl run --name wlu -- sleep 1000 </dev/null >/tmp/wlu.log 2>&1 &
}
# units_show [noctl]: what each of $units has, for the record
# (schedpolicyctl not with noctl: it would start a stopped daemon by D-Bus
# activation).
units_show() {
	for n in $units; do echo "$n AllowedCPUs=$(sc "$n") EffectiveCPUs=$(prop "$n" EffectiveCPUs) task=$(cpus_allowed "$(unit_pid "$n")")"; done
	[ "${1:-}" = noctl ] || schedpolicyctl workloads
}
# system_slice: "UNIT=ALLOWEDCPUS" for every active unit of system.slice.
system_slice() {
	for n in $(systemctl list-units --plain --no-legend --type=service,scope --state=active | awk '{ print $1 }'); do
		[ "$(prop "$n" Slice)" = system.slice ] && echo "$n=$(sc "$n")"
	done
}

# Units in schedpolicyd.slice (units_start) and the lingering user's
# manager, a workload of class user never confined (app.slice is in
# manage, and no cpuset is delegated to it: cgroup v1, or on v2 the
# package's drop-in masked); after
# every switch each unit's AllowedCPUs= is what schedpolicyctl says (on v2
# also its cpuset.cpus.effective and its task's Cpus_allowed_list), a kill
# -9 recovers the records, the stop resets exactly what the daemon set.
# The container manages system.slice too (its units as found after the
# stop), keeps a value set by hand and forgets a stopped unit; the VM
# ("auto" choosing systemd) manages only schedpolicyd.slice (under
# emulation the system services, this script's own unit among them, are
# busy enough to make powersaving race to idle) and checks the CPU
# pressure trigger's wake.
testcase_systemd_units() {
	user_linger 60
	units="spsvc1.service spsvc2.service wlu.scope"
	trap 'systemctl stop spsvc1.service spsvc2.service wlu.scope spburst.service 2>/dev/null; cp "$base" "$conf"; [ "$v2" = 0 ] || user_delegate default; systemctl start "$unit"' EXIT
	before="" after=""
	if [ "$v2" = 1 ]; then
		# The package delegates cpuset to every user's manager; masked
		# here (an administrator's undo), the manager is one unit of
		# class user.
		user_delegate masked
		units="$units $um"
		units_conf 'manage = ["schedpolicyd.slice", "app.slice"]'
		check user-probe-whole
		schedpolicyd probe 2>&1 | grep -q "user:  *$um: placed as a whole, never confined: cpuset is not delegated" ||
			fail_now "$(schedpolicyd probe 2>&1 | grep -A3 placement)"
		pass "user-probe-whole: $(schedpolicyd probe 2>&1 | grep "$um" | sed 's/^ *//')"
	else
		units_conf 'manage = ["schedpolicyd.slice", "system.slice", "app.slice"]'
		before=$(system_slice)
	fi
	c4=$(cursor)
	systemctl restart "$unit"
	wait_until 20 unit_running
	check "$(v1v2 "placement systemd" systemd-placement-on)"
	journal_wait "$c4" 10 "msg=\"managing units through systemd\"$(v1v2 '' ' cgroup_v2=true')" ||
		fail_now "$(journal_since "$c4" | grep -E 'placement' | tail -n 3)"
	pass "$(v1v2 "placement = \"systemd\": the daemon manages units through systemd ($(journal_since "$c4" | grep -o 'slices=[^ ]*' | head -n 1))" systemd-placement-on)"
	units_start
	check "$(v1v2 "units adopted" systemd-units-adopted)"
	wait_workloads 20 $units || fail_now "$(schedpolicyctl workloads 2>&1; cat /tmp/wlu.log; journal_since "$c4" | grep -E 'user|listing|adopted' | tail -n 8)"
	pass "$(v1v2 "units adopted from systemd's signals: spsvc1.service, spsvc2.service (AllowedCPUs=$last by its admin), wlu.scope (schedpolicyctl run)" systemd-units-adopted)"
	if [ "$v2" = 0 ]; then
		check "schedpolicyctl run scope"
		[ "$(prop wlu.scope Slice)" = schedpolicyd.slice ] && [ "$(prop wlu.scope ControlGroup)" = /schedpolicyd.slice/wlu.scope ] ||
			fail_now "Slice=$(prop wlu.scope Slice) ControlGroup=$(prop wlu.scope ControlGroup)"
		pass "schedpolicyctl run started transient scope wlu.scope in schedpolicyd.slice"
		check "user manager adopted"
		wait_until 10 sh -c "[ \"\$(schedpolicyctl workloads | awk '\$1 == \"$um\" { print \$2 }')\" = user ]" || fail_now "$(schedpolicyctl workloads)"
		pass "app.slice in manage: $um (the lingering user's manager) is a workload of class user"
	fi
	excerpt "units before the switches" units_show
	i=0
	for pol in powersaving performance powersaving; do
		i=$((i + 1))
		schedpolicyctl set "$pol" >/dev/null
		wait_until 10 is_policy "$pol"
		if [ "$pol" = powersaving ]; then
			wait_set 10 spsvc1.service
		else
			wait_unset 10 spsvc1.service
		fi
		check "$(v1v2 "$pol AllowedCPUs" "systemd-switch-$pol")"
		why=$(units_ok "$units") || fail_now "$why"
		s1=$(sc spsvc1.service) s2=$(sc spsvc2.service) s3=$(sc wlu.scope) u=$(sc "$um")
		case $pol in
		powersaving) one_cpu "$s1" && [ "$s1" = "$s3" ] && [ "$s2" = "$last" ] && [ -z "$u" ] ;;
		performance) [ -z "$s1" ] && [ -z "$s3" ] && [ "$s2" = "$last" ] && [ -z "$u" ] ;;
		esac || fail_now "AllowedCPUs spsvc1=$s1 wlu.scope=$s3 spsvc2=$s2 $um=$u"
		if [ "$v2" = 1 ]; then
			pass "systemd-switch-$pol: spsvc1=${s1:-unset} wlu.scope=${s3:-unset} spsvc2=$s2 $um=${u:-unset} (class user), applied to the tasks"
		elif [ "$i" = 1 ]; then
			pass "powersaving: AllowedCPUs spsvc1=$s1 wlu.scope=$s3 (packed), spsvc2=$s2 (its admin's value bounds it); systemctl show = schedpolicyctl"
		elif [ "$i" = 2 ]; then
			pass "performance: AllowedCPUs reset to the originals (spsvc1 and wlu.scope unset, spsvc2 $last)"
		else
			check "unit records"
			grep -q '"unit": "spsvc1.service"' "$state" && grep -q '"applied_cpus"' "$state" || fail_now "$(cat "$state")"
			pass "state.json records the units' originals and the values set"
			check "user manager never confined"
			assert_eq "$(wl_class "$um") $(sc "$um")" "user "
			pass "powersaving: $um (class user: the session and the focused app run in it) has no AllowedCPUs="
		fi
		excerpt "units after $pol" units_show
	done
	check "$(v1v2 "recovery after kill -9" systemd-kill-9-recovers)"
	k9_pid=$(main_pid "$unit") c7=$(cursor)
	systemctl kill -s KILL "$unit"
	wait_until 40 restarted_from "$k9_pid" && journal_wait "$c7" 60 'original AllowedCPUs recovered from saved state.*spsvc1.service' ||
		fail_now "$(journal_since "$c7" | grep -iE 'unit|recover' | tail -n 5)"
	pass "$(v1v2 "kill -9 and restart: the new daemon recovered the units' originals from state.json (AllowedCPUs spsvc1=$(sc spsvc1.service) kept)" \
		"systemd-kill-9-recovers: AllowedCPUs spsvc1=$(sc spsvc1.service) kept")"
	excerpt "journal: after kill -9" sh -c "journalctl --no-pager --after-cursor='$c7' | grep -E 'recovered from saved state|managing units|adopted unit'"
	if [ "$v2" = 0 ]; then
		units_by_hand
	else
		units_pressure
	fi
	systemctl stop "$unit"
	[ "$v2" = 0 ] && after=$(for n in $(echo "$before" | cut -d= -f1); do echo "$n=$(sc "$n")"; done)
	check "$(v1v2 "stop resets AllowedCPUs" systemd-stop-resets)"
	[ -z "$(sc spsvc1.service)" ] && [ -z "$(sc "$um")" ] && [ "$(sc spsvc2.service)" = "$last" ] && [ "$(sc wlu.scope)" = "$(v1v2 "$last" "")" ] &&
		[ "$before" = "$after" ] && why=$(units_ok "$units" noctl) ||
		fail_now "spsvc1=$(sc spsvc1.service) wlu=$(sc wlu.scope) spsvc2=$(sc spsvc2.service) $um=$(sc "$um") ${why:-}; system.slice before: $before after: $after"
	pass "$(v1v2 "stop reset every AllowedCPUs to its original (the stopped spsvc1 and $um unset; spsvc2 and, set by hand, wlu.scope $last; system.slice's $(echo "$before" | wc -l) units as found)" \
		"systemd-stop-resets: spsvc1 and wlu.scope unset (tasks on $all), spsvc2 $last")"
	excerpt "units after the stop" units_show noctl
	check "$(v1v2 "unit records after the stop" systemd-stop-state)"
	state_clean || fail_now "$(cat "$state")"
	pass "$(v1v2 "state.json holds no value of ours after the stop" systemd-stop-state)"
}
# units_by_hand (the container): a value someone else sets is theirs,
# kept, never overwritten or reset (wlu.scope, from here on); a unit that
# stops is forgotten (spsvc1).
units_by_hand() {
	systemctl set-property --runtime wlu.scope AllowedCPUs="$last"
	c9=$(cursor)
	schedpolicyctl set performance
	wait_until 10 is_policy performance
	check "a value set by hand is kept"
	journal_wait "$c9" 10 'AllowedCPUs was changed by someone else.*unit=wlu.scope' && [ "$(sc wlu.scope)" = "$last" ] ||
		fail_now "wlu.scope AllowedCPUs=$(sc wlu.scope); $(journal_since "$c9" | grep -i 'someone else' | tail -n 2)"
	pass "an AllowedCPUs set by hand (wlu.scope=$last) is kept as the unit's original across a switch"
	schedpolicyctl set powersaving
	wait_set 10 spsvc1.service
	c8=$(cursor)
	systemctl stop spsvc1.service
	check "stopped unit forgotten"
	journal_wait "$c8" 10 'msg="unit gone".*unit=spsvc1.service' && ! workloads_are spsvc1.service || fail_now "$(schedpolicyctl workloads)"
	pass "a stopped unit is forgotten (journal: unit gone)"
}
# units_pressure (the VM): the packaged unit grants CAP_SYS_RESOURCE, and
# the kernel then gives the CPU pressure trigger its 500 ms window (2 s
# without: docs/BENCHMARKS.md, issue 15). A packed unit turning busy after
# every unit idled: with the trigger sampling has stopped, and the
# trigger's wake (500 ms window, then a 30 ms confirmation of the unit's
# runnable threads) widens it at once; without one the backed-off
# sampling (32 s by then) would. The unit writes the time its spinners
# start (ns) to /run/spburst.start.
units_pressure() {
	check systemd-pressure-window
	armed=$(journalctl --no-pager -b -u "$unit" | grep 'CPU pressure trigger armed' | tail -n 1)
	assert_in 'window=500ms' "$armed"
	pass "systemd-pressure-window: ${armed##*msg=}"
	t0=$(date +%s) cb=$(cursor)
	rm -f /run/spburst.start
	systemd-run --quiet --unit=spburst --slice=schedpolicyd.slice sh -c 'sleep 45; date +%s%N >/run/spburst.start; (while :; do :; done) & while :; do :; done'
	packed() { one_cpu "$(sc spburst.service)"; }
	widened() { ! packed; }
	check systemd-pressure-wake
	wait_until 30 packed || fail_now "spburst.service not packed while idle: AllowedCPUs=$(sc spburst.service)"
	while [ ! -s /run/spburst.start ] && [ $(($(date +%s) - t0)) -lt 60 ]; do sleep 0.05; done
	w0=$(date +%s)
	while ! widened && [ $(($(date +%s) - w0)) -lt 60 ]; do sleep 0.05; done
	# The daemon's lines about the unit and its wakes, for a failure.
	burst_log() { journal_since "$cb" SYSLOG_IDENTIFIER=schedpolicyd | grep -iE 'pressure|wake|busy|confirm|spburst' | tail -n 12; }
	widened || fail_now "not widened within 60 s of the burst: AllowedCPUs=$(sc spburst.service); $(burst_log)"
	ms=$((($(date +%s%N) - $(cat /run/spburst.start)) / 1000000))
	[ $((ms / 1000)) -le 15 ] || fail_now "widened only $((ms / 1000)) s after the burst: the periodic sample, not the pressure wake; $(burst_log)"
	note "spburst widened ${ms} ms after its two spinners started (polled every 50 ms through systemctl show; AllowedCPUs=$(sc spburst.service); task on $(cpus_allowed "$(unit_pid spburst.service)"))"
	pass systemd-pressure-wake
	systemctl stop spburst.service
}

# --- [[slice]] rules: a slice packed harder than another ---------------------------
# spbg.slice has the rule "powersaving, always": under performance its
# unit is packed while schedpolicyd.slice's stays unset (on v2 its task
# runs on one CPU, the other's on every CPU); a reload without "always"
# unsets it again; a rule for a slice not in manage is refused with its
# line and changes nothing (the container); the stop resets both.
slice_conf() {
	units_conf 'manage = ["schedpolicyd.slice", "spbg.slice"]\n\n[[slice]]\nname = "spbg.slice"\npolicy = "powersaving"' "$@"
}
testcase_slice_rules() {
	units="spbg1.service spw1.service"
	slice_conf 'always = true'
	trap 'systemctl stop spbg1.service spw1.service 2>/dev/null; cp "$base" "$conf"; systemctl start "$unit"' EXIT
	systemctl restart "$unit"
	wait_until 20 unit_running
	schedpolicyctl set performance >/dev/null
	systemd-run --quiet --unit=spbg1 --slice=spbg.slice sleep 1000
	systemd-run --quiet --unit=spw1 --slice=schedpolicyd.slice sleep 1000
	check "$(v1v2 "slice units adopted" slice-units-adopted)"
	wait_workloads 20 $units || fail_now "$(schedpolicyctl workloads 2>&1)"
	pass "$(v1v2 "units of spbg.slice and schedpolicyd.slice adopted; classes spbg1=$(wl_class spbg1.service) spw1=$(wl_class spw1.service)" \
		"slice-units-adopted: $(schedpolicyctl workloads | awk '$1 ~ /^sp(bg1|w1)/ { printf "%s class %s; ", $1, $2 }')")"
	check classes
	[ "$(wl_class spbg1.service)" = spbg ] && [ "$(wl_class spw1.service)" = workload ] ||
		fail_now "spbg1=$(wl_class spbg1.service) spw1=$(wl_class spw1.service), want spbg and workload"

	wait_set 10 spbg1.service
	b=$(sc spbg1.service) w=$(sc spw1.service)
	check "$(v1v2 "slice rule with always under performance" slice-rule-always-performance)"
	is_policy performance && one_cpu "$b" && [ -z "$w" ] && why=$(units_ok "$units") ||
		fail_now "policy $(active_policy) spbg1=$b spw1=$w ${why:-}"
	pass "$(v1v2 "performance with [[slice]] spbg.slice powersaving always: AllowedCPUs spbg1=$b (packed), spw1 unset; systemctl show = schedpolicyctl" \
		"slice-rule-always-performance: spbg1 cpuset.cpus.effective and task on $b, spw1 unset (task on $all)")"
	excerpt "slice units under performance" units_show

	schedpolicyctl set powersaving >/dev/null
	wait_set 10 spw1.service
	b=$(sc spbg1.service) w=$(sc spw1.service)
	check "$(v1v2 "powersaving with a slice rule" slice-rule-powersaving)"
	one_cpu "$b" && one_cpu "$w" && why=$(units_ok "$units") || fail_now "spbg1=$b spw1=$w ${why:-}"
	pass "$(v1v2 "powersaving: both packed (AllowedCPUs spbg1=$b spw1=$w)" "slice-rule-powersaving: spbg1=$b spw1=$w, applied to the tasks")"

	# A reload without "always": under performance the rule no longer applies.
	schedpolicyctl set performance >/dev/null
	slice_conf
	c10=$(cursor)
	systemctl reload "$unit"
	check "$(v1v2 "reload of a slice rule" slice-rule-reload)"
	journal_wait "$c10" 10 'msg="configuration reloaded"' && wait_unset 10 spbg1.service && [ -z "$(sc spw1.service)" ] && why=$(units_ok "$units") ||
		fail_now "spbg1=$(sc spbg1.service) spw1=$(sc spw1.service) ${why:-} $(journal_since "$c10" | grep -i reload | tail -n 3)"
	pass "$(v1v2 "systemctl reload without always: spbg1 unset again under performance ($(journalctl --no-pager --after-cursor="$c10" | grep -o 'msg="reload: slice rules changed" slices="[^"]*"' | head -n 1))" \
		"slice-rule-reload: without always spbg1 is unset again, its task on $all")"

	# A rule for a slice that is not managed: refused, the running rules
	# stay (the container's check).
	if [ "$v2" = 0 ]; then
		slice_conf 'always = true\n[[slice]]\nname = "nope.slice"\npolicy = "balance"'
		bad=$(grep -n -m1 -e 'name = "nope.slice"' "$conf" | cut -d: -f1)
		c11=$(cursor)
		systemctl reload "$unit"
		check "bad slice rule on reload"
		journal_wait "$c11" 10 "keeping the running configuration.*$conf:$bad: slice.name: .*not in manage" && [ -z "$(sc spbg1.service)" ] ||
			fail_now "spbg1=$(sc spbg1.service); $(journal_since "$c11" | grep -i 'reload\|slice' | tail -n 3)"
		pass "a [[slice]] for an unmanaged slice is refused ($conf:$bad in the journal); spbg1 stays unset"
	fi

	schedpolicyctl set powersaving >/dev/null
	wait_set 10 spbg1.service
	systemctl stop "$unit"
	check "$(v1v2 "stop resets the slice units" slice-stop-resets)"
	[ -z "$(sc spbg1.service)" ] && [ -z "$(sc spw1.service)" ] && why=$(units_ok "$units" noctl) ||
		fail_now "spbg1=$(sc spbg1.service) spw1=$(sc spw1.service) ${why:-}"
	[ "$v2" = 1 ] && pass "slice-stop-resets: spbg1 and spw1 unset, tasks on $all" && check slice-stop-state
	state_clean || fail_now "$(cat "$state")"
	pass "$(v1v2 "stop reset spbg1 and spw1 to unset; state.json holds no value of ours" slice-stop-state)"
}

# --- dpkg --purge leaves nothing ----------------------------------------------------
testcase_purge() {
	# The workloads a cgroupfs testcase left running end first.
	for p in $(cat "$parent"/wl*/cgroup.procs 2>/dev/null); do kill "$p"; done
	wait_until 10 sh -c "! cat $parent/wl*/cgroup.procs 2>/dev/null | grep -q ."
	files=$(dpkg -L schedpolicyd)
	check "$(v1v2 "dpkg --purge" purge-dpkg)"
	dpkg --purge schedpolicyd >/tmp/dpkg-purge.log 2>&1 || fail_now "dpkg --purge exited non-zero: $(tail -n 5 /tmp/dpkg-purge.log | tr '\n' ' ')"
	pass "$(v1v2 "dpkg --purge" purge-dpkg)"
	# What the package installed, its configuration and state, the unit's
	# links, deb-systemd-helper's records; a process, the FUSE mount.
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
		/etc/systemd/system/$unit \
		/var/lib/systemd/deb-systemd-helper-enabled/$unit.dsh-also \
		/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/$unit \
		/var/lib/systemd/deb-systemd-helper-masked/$unit \
		/lib/systemd/system/$unit /usr/sbin/schedpolicyd /usr/bin/schedpolicyctl; do
		{ [ -e "$f" ] || [ -L "$f" ]; } && left="$left $f"
	done
	dpkg-query -W -f '${Status}' schedpolicyd 2>/dev/null | grep -q installed && left="$left (dpkg still knows it)"
	pgrep -x schedpolicyd >/dev/null && left="$left (a schedpolicyd process)"
	awk '$3 ~ /^fuse/ && $2 ~ /schedpolicyd/' /proc/self/mounts | grep -q . && left="$left (the FUSE mount)"
	check "$(v1v2 "left after the purge" purge-clean)"
	assert_eq "${left# }" ""
	pass "$(v1v2 "nothing left after the purge" purge-clean)"
	if [ "$v2" = 1 ]; then
		check purge-unit-gone
		assert_eq "$(prop "$unit" LoadState)" not-found
		pass purge-unit-gone
	fi
}
