# battery.sh — a real battery in the cgroup v2 VM: testpower.ko (rootfs.sh
# builds it against the VM's kernel) registers a mains adapter "AC" and a
# battery "BAT0" with the kernel's power_supply class; each write to its
# parameters sends a real "change" uevent. The daemon, its units in
# schedpolicyd.slice and the package's configuration otherwise, is driven
#
#   AC, charging 80 %      performance: every unit on every CPU
#   unplugged              powersaving (power_aware_policy's default), the
#                          idle units packed onto one CPU
#   60 %                   powersaving, still packed
#   15 %                   low battery (low_battery = 20): powersaving
#   plugged in             performance: every unit on every CPU again
#   power_aware_policy = "balance" (systemctl reload), unplugged at 60 %:
#                          balance, packed
#   15 %, 22 %, 25 %       low battery, powersaving, still within the 5
#                          points of hysteresis at 22 %, balance at 25 %
#   plugged in             performance
#   rmmod testpower        no supplies: unknown, performance
#
# and after each step the policy and its reason (schedpolicyctl status),
# and each unit's AllowedCPUs=, cgroup cpuset.cpus.effective, its task's
# Cpus_allowed_list and what schedpolicyctl workloads reports must agree
# with the step's rule; an administrator's AllowedCPUs= on one unit stays
# throughout. The kernel's uevents (udevadm monitor) and the daemon's
# journal lines are printed for the record.
#
# Sourced after lib.sh by vm-guest.sh, which sets base, the configuration
# file to start from; one testcase, testcase_battery.

b_par=/sys/module/testpower/parameters
b_units="spbat1.service spbat2.service spbat3.service"

# b_mark: keep the journal cursor (b_c) and the guest's uptime (b_up, the
# journal's monotonic clock) of now, for b_step's journal lines.
b_mark() {
	b_c=$(cursor)
	read -r b_up _ </proc/uptime
}
# b_write PARAM VALUE: set a testpower parameter and say so, after b_mark.
b_write() {
	b_mark
	check "battery-write-$1-$2"
	echo "$2" >"$b_par/$1" 2>/tmp/b_write.err || fail_now "$(cat /tmp/b_write.err)"
	note "wrote $2 > $b_par/$1"
}

# b_field NAME: a string field of schedpolicyctl status --json.
b_field() { schedpolicyctl status --json 2>/dev/null | sed -n "s/^  \"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p"; }

# b_is POLICY SOURCE PATTERN: the daemon's policy is POLICY, its power
# source SOURCE, and its reason matches the grep pattern.
b_is() { [ "$(b_field active_policy)" = "$1" ] && [ "$(b_field power_source)" = "$2" ] && b_field reason | grep -q -e "$3"; }

# b_packed: the three units are placed, the two without an administrator's
# value on one CPU, the same one; the third keeps its own.
b_packed() {
	s1=$(sc spbat1.service) s2=$(sc spbat2.service) s3=$(sc spbat3.service)
	[ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$(cpulist_count "$s1")" = 1 ] && [ "$s3" = "$b_last" ]
}
# b_spread: every unit on every CPU but the administrator's.
b_spread() { [ -z "$(sc spbat1.service)" ] && [ -z "$(sc spbat2.service)" ] && [ "$(sc spbat3.service)" = "$b_last" ]; }

# b_journal: the daemon's power, tier, policy and placement lines since
# the last b_mark, each with its time since then.
b_journal() {
	journal_since "$b_c" -u "$unit" | grep -E 'power state changed|low-battery tier|policy changed|placement changed' |
		awk -v up="$b_up" '{ t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t); sub(/^\[[^]]*\] [^ ]+ [^ ]+ /, ""); printf "+%5d ms %s\n", (t - up) * 1000, $0 }'
}
# b_after PATTERN: "+N ms" from the last b_mark to the first daemon line
# since then matching PATTERN, or nothing.
b_after() { b_journal | grep -e "$1" | head -n 1 | sed 's/^+ */+/; s/ ms .*/ ms/'; }

b_show() { for n in $b_units; do echo "$n AllowedCPUs=$(sc "$n") cpuset.cpus.effective=$(cat "$(unit_cg "$n")/cpuset.cpus.effective" 2>/dev/null) task=$(cpus_allowed "$(unit_pid "$n")") schedpolicyctl=$(ucpus "$n")"; done; }

# b_step NAME POLICY SOURCE PATTERN PLACEMENT: wait (60 s: the VM is
# emulated) until the daemon says POLICY on SOURCE with a reason matching
# PATTERN, the units are placed as PLACEMENT (b_packed or b_spread) says
# and what every unit's task may use agrees (placed_ok: systemd applies
# AllowedCPUs= to the cgroup and its tasks after it reports the value);
# one PASS or FAIL line with the daemon's latencies since the last write.
b_ready() { b_is "$1" "$2" "$3" && $4 && units_ok "$b_units" >/dev/null; }
b_step() {
	wait_until 60 b_ready "$2" "$3" "$4" "$5"
	check "battery-$1"
	why=""
	b_ready "$2" "$3" "$4" "$5" && why=$(units_ok "$b_units") || {
		excerpt "journal: $1 (time since the write)" b_journal
		fail_now "want $2 on $3 (reason ~ '$4', $5): policy $(b_field active_policy) on $(b_field power_source), reason '$(b_field reason)'; ${why:-}; $(b_show | tr '\n' ';')"
	}
	when=""
	pc=$(b_after 'msg="policy changed"') && [ -n "$pc" ] && when=" (policy changed $pc"
	pl=$(b_after 'msg="placement changed"') && [ -n "$pl" ] && when="${when:- (}${when:+, }placement changed $pl"
	[ -n "$when" ] && when="$when after the write)"
	pass "battery-$1: $2 on $3$when, $(echo "$5" | sed 's/^b_//'): spbat1=$(sc spbat1.service) spbat2=$(sc spbat2.service) spbat3=$(sc spbat3.service), applied to the tasks; reason: $(b_field reason)"
	excerpt "journal: $1 (time since the write)" b_journal
}

testcase_battery() {
	b_last=$(sed 's/.*[-,]//' /sys/devices/system/cpu/online)
	check battery-module
	modprobe testpower 2>/tmp/modprobe.err || fail_now "modprobe testpower: $(cat /tmp/modprobe.err) (rootfs.sh builds it into the VM root)"
	trap 'kill "${b_mon:-}" 2>/dev/null; systemctl stop $b_units 2>/dev/null; systemctl stop "$unit"; cp "$base" "$conf"; rmmod testpower 2>/dev/null' EXIT
	ps=/sys/class/power_supply
	[ "$(cat $ps/AC/type)" = Mains ] && [ "$(cat $ps/AC/online)" = 1 ] && [ "$(cat $ps/BAT0/type)" = Battery ] &&
		[ "$(cat $ps/BAT0/status)" = Charging ] && [ "$(cat $ps/BAT0/capacity)" = 80 ] ||
		fail_now "$(grep -r . $ps/*/type $ps/*/online $ps/*/status $ps/*/capacity 2>&1 | tr '\n' ' ')"
	pass "battery-module: $(modinfo -F vermagic testpower | cut -d' ' -f1): AC Mains online, BAT0 Charging 80 %"
	# Bad values are refused and change nothing.
	check battery-module-bad-values
	! echo sideways >$b_par/battery_status 2>/dev/null && ! echo 101 >$b_par/battery_capacity 2>/dev/null &&
		[ "$(cat $ps/BAT0/status)" = Charging ] && [ "$(cat $ps/BAT0/capacity)" = 80 ] ||
		fail_now "$(cat $ps/BAT0/status) $(cat $ps/BAT0/capacity)"
	pass "battery-module-bad-values: EINVAL, nothing changed"
	udevadm monitor --kernel --subsystem-match=power_supply --property </dev/null >/tmp/uevents.log 2>&1 &
	b_mon=$!

	# A fresh knob: the earlier checks' explicit choices (state.json,
	# per power source) would otherwise decide instead of the power source.
	# Nothing else is lost: a clean stop leaves no record there. And no
	# power-profiles-daemon, whose profile the daemon would follow.
	systemctl stop "$unit" power-profiles-daemon.service
	rm -f /var/lib/schedpolicyd/state.json
	cp "$base" "$conf"
	printf 'manage = ["schedpolicyd.slice"]\nlog_level = "debug"\n' >>"$conf"
	b_mark
	systemctl start "$unit"
	# Idle units (they sleep): under emulation anything busier makes the
	# plan race to idle. spbat3 carries an administrator's AllowedCPUs=.
	systemd-run --quiet --unit=spbat1 --slice=schedpolicyd.slice sleep 10000
	systemd-run --quiet --unit=spbat2 --slice=schedpolicyd.slice sleep 10000
	systemd-run --quiet --unit=spbat3 --slice=schedpolicyd.slice -p AllowedCPUs="$b_last" sleep 10000
	check battery-units
	wait_workloads 30 $b_units || fail_now "not all of $b_units are workloads: $(schedpolicyctl workloads 2>&1 | tr '\n' ';')"
	b_step ac performance ac 'rule 2' b_spread

	b_write ac_online off
	b_step unplugged powersaving battery 'rule 3' b_packed
	check battery-uevent
	journal_since "$b_c" -u "$unit" | grep 'power state changed' | grep -q 'trigger=uevent' ||
		fail_now "$(journal_since "$b_c" -u "$unit" | grep 'power state changed')"
	pass "battery-uevent: the daemon re-read the supplies on the kernel's uevent"
	b_write battery_capacity 60
	b_step 60 powersaving battery 'rule 3' b_packed
	b_write battery_capacity 15
	b_step low-15 powersaving battery 'below low_battery 20%' b_packed
	b_write ac_online on
	b_step plugged-in performance ac 'rule 2' b_spread

	# power_aware_policy = "balance": low battery is the only way to
	# powersaving on battery now.
	b_mark
	printf 'power_aware_policy = "balance"\n' >>"$conf"
	systemctl reload "$unit"
	check battery-reload
	journal_wait "$b_c" 30 'configuration reloaded' || fail_now "$(journal_since "$b_c" -u "$unit" | tail -n 3)"
	b_write battery_capacity 60
	b_write ac_online off
	b_step balance-60 balance battery 'rule 3' b_packed
	b_write battery_capacity 15
	b_step balance-low-15 powersaving battery 'below low_battery 20%' b_packed
	b_write battery_capacity 22
	b_step balance-low-22 powersaving battery 'not yet back 5 points above low_battery 20%' b_packed
	b_write battery_capacity 25
	b_step balance-recovered-25 balance battery 'rule 3' b_packed
	b_write ac_online on
	b_step balance-plugged-in performance ac 'rule 2' b_spread

	# The supplies go away: nothing says battery, so performance.
	b_mark
	rmmod testpower
	note "rmmod testpower"
	b_step removed performance unknown 'rule 4' b_spread

	kill "$b_mon" 2>/dev/null
	wait "$b_mon" 2>/dev/null
	excerpt "kernel uevents (udevadm monitor --kernel --subsystem-match=power_supply), first and last" sh -c "grep -E '^KERNEL|POWER_SUPPLY_(ONLINE|STATUS|CAPACITY)=' /tmp/uevents.log | sed -n '1,12p;\$p'"
	note "kernel uevents seen: $(grep -c '^KERNEL' /tmp/uevents.log)"
}
