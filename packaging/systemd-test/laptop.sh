# laptop.sh — the laptop issue's checks (issue 27) under the real systemd
# 252 of the container and of the VM:
#
#   laptop_ppd       power_profiles_api = "auto" never locks
#                    power-profiles-daemon out: while it is installed
#                    (disabled) the names stay free; its start, restart,
#                    stop/start (an upgrade) and its restart after a crash
#                    all succeed, and schedpolicyd follows it; masked, it
#                    counts as not installed and schedpolicyd serves the
#                    names; unmasked again, they are released at once
#   laptop_journal   every line carries its priority: journalctl -p warning
#                    shows an error of the daemon's and not its info lines
#   laptop_placed    a policy change that moves units logs one info line,
#                    "placement changed", with how many moved, how many hold
#                    CPUs the daemon set and which, the policy and why
#                    (the VM: units placed through systemd)
#   laptop_unclean   kill -9, then systemctl stop before systemd restarts
#                    it: ExecStopPost= (schedpolicyd cleanup) detaches the
#                    dead tree, and /run/schedpolicyd is gone after the stop
#
# Sourced after lib.sh by container-guest.sh and vm-guest.sh, which set
# base, the configuration file to start from (power_profiles_api left at
# its default, "auto"); each testcase starts the daemon from it when it
# does not run so. The roots have Debian's power-profiles-daemon installed
# and disabled (rootfs.sh).

l_ppd=power-profiles-daemon.service

# l_owner NAME: the unique name owning NAME on the system bus, empty when
# nobody does.
l_owner() {
	busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetNameOwner s "$1" 2>/dev/null |
		sed -n 's/^s "\(.*\)"$/\1/p'
}
# l_pid NAME: the pid of NAME's owner, empty when nobody owns it.
l_pid() {
	lo=$(l_owner "$1")
	[ -n "$lo" ] || return 0
	busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetConnectionUnixProcessID s "$lo" 2>/dev/null |
		awk '{ print $2 }'
}
# l_ppd_owns: power-profiles-daemon's main process owns its name.
l_ppd_owns() {
	lp=$(main_pid "$l_ppd") || return 1
	[ "$(l_pid net.hadess.PowerProfiles)" = "$lp" ]
}
# l_we_own: schedpolicyd's main process owns both power-profiles names.
l_we_own() {
	lp=$(main_pid "$unit") || return 1
	[ "$(l_pid net.hadess.PowerProfiles)" = "$lp" ] && [ "$(l_pid org.freedesktop.UPower.PowerProfiles)" = "$lp" ]
}
# l_free: nobody owns either power-profiles name.
l_free() { [ -z "$(l_owner net.hadess.PowerProfiles)" ] && [ -z "$(l_owner org.freedesktop.UPower.PowerProfiles)" ]; }
# l_ok_active UNIT: UNIT is active and its last start did not fail.
l_ok_active() { [ "$(systemctl is-active "$1")" = active ] && [ "$(prop "$1" Result)" = success ]; }

# laptop_begin: the daemon started afresh from the guest's base
# configuration, power-profiles-daemon unmasked and stopped; lc is a
# cursor from before the start. laptop_up: running from the base
# configuration, started so when it is not.
laptop_begin() {
	systemctl stop "$unit"
	cp "$base" "$conf"
	systemctl unmask "$l_ppd" >/dev/null 2>&1
	systemctl stop "$l_ppd" 2>/dev/null
	systemctl reset-failed "$l_ppd" 2>/dev/null
	lc=$(cursor)
	systemctl start "$unit"
	check laptop-start
	wait_until 30 unit_running || fail_now "$unit is $(systemctl is-active "$unit")"
}
laptop_up() { cmp -s "$base" "$conf" && unit_running || laptop_begin; }

testcase_laptop_ppd() {
	laptop_begin
	# Installed and disabled: the names are left to it.
	check "names left to an installed power-profiles-daemon"
	journal_wait "$lc" 30 'a power-profiles daemon is installed' && l_free ||
		fail_now "owners $(l_owner net.hadess.PowerProfiles)/$(l_owner org.freedesktop.UPower.PowerProfiles); $(journal_since "$lc" -u "$unit" | grep -i profile | tail -n 3)"
	pass "power-profiles-daemon installed (disabled): schedpolicyd leaves the power-profiles names free"
	excerpt "probe: power profiles" sh -c "schedpolicyd probe | grep -A3 '^power profiles'"
	# Started after us: it gets its names, we follow it.
	lc=$(cursor)
	systemctl start "$l_ppd"
	check "power-profiles-daemon started after schedpolicyd"
	wait_until 20 l_ppd_owns && l_ok_active "$l_ppd" && journal_wait "$lc" 20 "following the power-profiles daemon's ActiveProfile" ||
		fail_now "$(systemctl is-active "$l_ppd") result $(prop "$l_ppd" Result), owner pid $(l_pid net.hadess.PowerProfiles); $(journalctl -u "$l_ppd" -n 5 --no-pager)"
	pass "power-profiles-daemon started after schedpolicyd: it owns its name, schedpolicyd follows it"
	# Restarted (a package upgrade's try-restart), then stopped and started
	# (an upgrade that stops first): each start succeeds.
	for how in restart stop-start; do
		lc=$(cursor)
		old=$(main_pid "$l_ppd")
		case $how in
		restart) systemctl restart "$l_ppd" ;;
		stop-start)
			systemctl stop "$l_ppd"
			sleep 1 # a moment without it: schedpolicyd must not take the names
			check "names free while power-profiles-daemon is stopped"
			l_free || fail_now "owner pid $(l_pid net.hadess.PowerProfiles)"
			systemctl start "$l_ppd"
			;;
		esac
		check "power-profiles-daemon $how"
		wait_until 20 l_ppd_owns && l_ok_active "$l_ppd" && [ "$(main_pid "$l_ppd")" != "$old" ] &&
			journal_wait "$lc" 20 "following the power-profiles daemon's ActiveProfile" ||
			fail_now "$(systemctl is-active "$l_ppd") result $(prop "$l_ppd" Result), owner pid $(l_pid net.hadess.PowerProfiles); $(journalctl -u "$l_ppd" -n 5 --no-pager)"
		pass "power-profiles-daemon $how with schedpolicyd running: active, owns its name, followed again"
	done
	# A crash: its unit restarts it (Restart=on-failure), and that start
	# succeeds — schedpolicyd never served the names meanwhile.
	lc=$(cursor)
	old=$(main_pid "$l_ppd")
	systemctl kill -s KILL "$l_ppd"
	check "power-profiles-daemon killed"
	wait_until 30 sh -c "p=\$(systemctl show -p MainPID --value $l_ppd); [ -n \"\$p\" ] && [ \"\$p\" != 0 ] && [ \"\$p\" != $old ]" &&
		wait_until 20 l_ppd_owns && [ "$(systemctl is-active "$l_ppd")" = active ] &&
		! journal_since "$lc" -u "$unit" | grep -q 'serving the power-profiles API' ||
		fail_now "$(systemctl is-active "$l_ppd") result $(prop "$l_ppd" Result), owner pid $(l_pid net.hadess.PowerProfiles); $(journal_since "$lc" -u "$unit" | grep -i 'power-profiles' | tail -n 3)"
	pass "power-profiles-daemon killed: systemd restarts it and it gets its name; schedpolicyd never served it meanwhile"
	systemctl stop "$l_ppd"
	# Masked, it cannot start: schedpolicyd serves the names; unmasked, it
	# releases them at once (systemd reloads: UnitFilesChanged, Reloading).
	lc=$(cursor)
	systemctl mask "$l_ppd" >/dev/null 2>&1
	check "names served while power-profiles-daemon is masked"
	wait_until 20 l_we_own ||
		fail_now "owners $(l_owner net.hadess.PowerProfiles)/$(l_owner org.freedesktop.UPower.PowerProfiles); $(journal_since "$lc" -u "$unit" | grep -i profile | tail -n 3)"
	pass "power-profiles-daemon masked: schedpolicyd serves both power-profiles names"
	lc=$(cursor)
	systemctl unmask "$l_ppd" >/dev/null 2>&1
	check "names released once power-profiles-daemon is installed again"
	wait_until 20 l_free && journal_wait "$lc" 20 'released the power-profiles names' ||
		fail_now "owners $(l_owner net.hadess.PowerProfiles)/$(l_owner org.freedesktop.UPower.PowerProfiles)"
	pass "power-profiles-daemon unmasked: schedpolicyd released the names at once"
	systemctl start "$l_ppd"
	check "power-profiles-daemon after schedpolicyd served"
	wait_until 20 l_ppd_owns && l_ok_active "$l_ppd" || fail_now "$(systemctl is-active "$l_ppd") result $(prop "$l_ppd" Result)"
	pass "power-profiles-daemon starts after schedpolicyd served and released its names"
	systemctl stop "$l_ppd"
	excerpt "journal: power profiles" sh -c "journalctl --no-pager -u $unit -n 40 | grep -iE 'power-profiles|following' | tail -n 8"
}

testcase_laptop_journal() {
	laptop_up
	lc=$(cursor)
	systemctl reload "$unit"
	journal_wait "$lc" 20 'msg="configuration reloaded"'
	printf 'power_aware = "sometimes"\n' >>"$conf"
	systemctl reload "$unit"
	journal_wait "$lc" 20 'keeping the running configuration'
	cp "$base" "$conf"
	warn=$(journal_since "$lc" -u "$unit" -p warning)
	info=$(journal_since "$lc" -u "$unit" -p info)
	prio=$(journalctl --no-pager -o export --after-cursor="$lc" -u "$unit" |
		awk '/^PRIORITY=/ { p = $0 } /^MESSAGE=.*keeping the running configuration/ { print p; exit }')
	check "journal priorities"
	echo "$warn" | grep -q 'keeping the running configuration' && ! echo "$warn" | grep -q 'configuration reloaded' &&
		echo "$info" | grep -q 'configuration reloaded' && [ "$prio" = PRIORITY=3 ] ||
		fail_now "$prio; -p warning: $(echo "$warn" | tail -n 3)"
	pass "journalctl -p warning shows the daemon's error (stored at $prio) and not its info lines; -p info shows both"
}

testcase_laptop_placed() {
	laptop_up
	schedpolicyctl set performance >/dev/null
	trap 'schedpolicyctl set performance >/dev/null; systemctl stop lp-idle1 lp-idle2 2>/dev/null' EXIT
	for n in 1 2; do systemd-run --quiet --unit=lp-idle$n --slice=schedpolicyd.slice sleep 1000; done
	check laptop-placed-premise
	wait_until 30 sh -c "schedpolicyctl workloads 2>/dev/null | grep -q lp-idle2" ||
		fail_now "lp-idle1/2 are not workloads: $(schedpolicyctl workloads 2>&1 | tail -n 5 | tr '\n' ' ')"
	lc=$(cursor)
	schedpolicyctl set powersaving >/dev/null
	journal_wait "$lc" 30 'msg="placement changed".*policy=powersaving'
	line=$(journal_since "$lc" -u "$unit" -p info | grep 'msg="placement changed"' | grep 'policy=powersaving' | head -n 1)
	check laptop-placed
	echo "$line" | grep -q 'placement=systemd' && echo "$line" | grep -Eq 'moved=[1-9][0-9]* .*onto=[0-9]' ||
		fail_now "no info line with placement=systemd, moved and onto: '$line'"
	pass "laptop-placed: the switch to powersaving logged at info: $(echo "$line" | sed 's/.*msg=//')"
}

testcase_laptop_unclean() {
	laptop_up
	lc=$(cursor)
	systemctl kill -s KILL --kill-who=main "$unit"
	systemctl stop "$unit"
	# systemd's record of the ExecStopPost= run: its pid and exit status.
	post=$(systemctl show -p ExecStopPost --value "$unit")
	# Its output reaches the journal through a stream, maybe after stop
	# returned; the excerpt is for the reader.
	journal_wait "$lc" 20 'schedpolicyd cleanup: '
	clean=$(journal_since "$lc" | grep 'schedpolicyd cleanup:' | sed 's/.*schedpolicyd cleanup: //' | tr '\n' ';')
	check laptop-unclean
	[ ! -e /run/schedpolicyd ] && echo "$post" | grep -Eq 'code=exited ; status=0( |/)' && echo "$post" | grep -q 'pid=[1-9]' ||
		fail_now "after kill -9 and stop: $(ls -la /run/schedpolicyd 2>&1 | tr '\n' ' '); mounts: $(grep schedpolicyd /proc/self/mountinfo | tr '\n' ' '); ExecStopPost: $post; journal: $clean"
	pass "laptop-unclean: after kill -9 and stop, /run/schedpolicyd is gone; ExecStopPost= exited 0 ($clean)"
	systemctl start "$unit"
	check laptop-unclean-start
	wait_until 30 unit_running || fail_now "$unit is $(systemctl is-active "$unit") after the unclean stop"
}
