#!/bin/sh
# vm-react.sh — issue 15's react measurement on a real systemd with cgroup
# v2, the packaged unit as installed: not part of `make test` (it only
# measures). Run it in the QEMU VM:
#   packaging/build-deb.sh DIR   # prints the .deb's path
#   packaging/systemd-test/vm.sh --deb DEB packaging/systemd-test/vm-react.sh
# REACT_TRIALS (default 10) times: a unit in schedpolicyd.slice, packed
# under powersaving while idle, starts two CPU-bound processes after
# REACT_IDLE seconds (default 12; sampling has stopped by then), and the
# time from their start to its AllowedCPUs= widening is printed (polled
# every 50 ms through systemctl show), with the daemon's debug lines from
# the burst on and each step's time after it: the wake (the task-clock
# signal's "busy: confirming", else the pressure wake), the confirmation, the AllowedCPUs= call (journal, monotonic clock). Then the spinners end and the time
# until the unit is packed again is printed. Under QEMU TCG every figure
# carries the emulation's slowness.
. "${SYSTEMD_TEST_LIB:-./lib.sh}"

deb=${SYSTEMD_TEST_DEB:?the .deb to install}
unit=schedpolicyd.service
conf=/etc/schedpolicyd/schedpolicyd.conf
trials=${REACT_TRIALS:-10}
idle=${REACT_IDLE:-12}

note "guest: $(uname -r), $(systemctl --version | head -n 1), CPUs $(cat /sys/devices/system/cpu/online)"
dpkg -i "$deb" >/tmp/dpkg-i.log 2>&1 || { fail react-install "$(tail -n 5 /tmp/dpkg-i.log)"; done_checks; exit 1; }
printf 'manage = ["schedpolicyd.slice"]\nlog_level = "debug"\n' >>"$conf"
systemctl restart "$unit"
sleep 2
schedpolicyctl set powersaving >/dev/null
note "$(journalctl --no-pager -b -u "$unit" | grep 'CPU pressure trigger armed' | tail -n 1)"
packed() { v=$(sc "$1"); [ -n "$v" ] && [ "$(echo "$v" | tr -cd ',-')" = "" ]; }
widened() { v=$(sc "$1"); [ -z "$v" ] || [ -n "$(echo "$v" | tr -cd ',-')" ]; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
rm -f /tmp/react.steps
i=0
while [ "$i" -lt "$trials" ]; do
	i=$((i + 1))
	u=spreact$i
	rm -f /run/$u.start /run/$u.stop
	# One process that forks a second, both spinning for 8 s; then the
	# unit sleeps on (packed again later). The start time is written just
	# before the fork: no exec between it and the spinning.
	systemd-run --quiet --unit=$u --slice=schedpolicyd.slice python3 -c "
import os, time
time.sleep($idle)
open('/run/$u.start', 'w').write('%d %.6f' % (time.time_ns(), time.monotonic()))
pid = os.fork()
end = time.time() + 8
while time.time() < end:
    pass
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
open('/run/$u.stop', 'w').write(str(time.time_ns()))
time.sleep(1000)
"
	if ! wait_until 30 packed $u.service; then
		note "trial $i: $u not packed while idle: AllowedCPUs=$(sc $u.service)"
		systemctl stop $u.service
		continue
	fi
	c=$(cursor)
	while [ ! -s /run/$u.start ]; do sleep 0.05; done
	read -r t0 mono </run/$u.start
	w0=$(date +%s)
	while ! widened $u.service && [ $(($(date +%s) - w0)) -lt 30 ]; do sleep 0.05; done
	if widened $u.service; then
		note "trial $i: widened $(ms_since "$t0") ms after the burst, which began at monotonic $mono s (AllowedCPUs=$(sc $u.service))"
	else
		note "trial $i: not widened within 30 s"
	fi
	# The daemon's lines from the burst on, and each step's time after it
	# (the journal's monotonic clock is the burst's).
	journal_since "$c" -u "$unit" | awk -v m="$mono" 'match($0, /\[ *[0-9.]+\]/) && substr($0, RSTART + 1, RLENGTH - 2) + 0 >= m + 0' >/tmp/$u.log
	grep -E 'woken|confirming|not confirmed|AllowedCPUs set|task-clock' /tmp/$u.log | head -n 8 | sed 's/^/    /'
	step() { grep -E "$1" /tmp/$u.log | head -n 1 | awk -v m="$mono" 'match($0, /\[ *[0-9.]+\]/) { printf "%d", (substr($0, RSTART + 1, RLENGTH - 2) - m) * 1000 }'; }
	wake=$(step 'msg="woken: units sampled"|msg=woken |msg="busy: confirming"')
	conf=$(step 'signal="(cpu pressure|sample|task clock)( retry)? confirmed"')
	set=$(step 'msg="AllowedCPUs set".*unit='$u.service)
	note "trial $i: steps after the burst: wake ${wake:-?} ms, confirmed ${conf:-?} ms, AllowedCPUs set ${set:-?} ms"
	echo "$wake $conf $set" >>/tmp/react.steps
	while [ ! -s /run/$u.stop ]; do sleep 0.2; done
	t1=$(cat /run/$u.stop)
	if wait_until 90 packed $u.service; then
		note "trial $i: packed again $(ms_since "$t1") ms after the spinners ended"
	else
		note "trial $i: not packed again within 90 s of the spinners' end: AllowedCPUs=$(sc $u.service)"
	fi
	systemctl stop $u.service
done
systemctl stop "$unit"
# p50 and max of each step over the trials that logged it.
for col in 1 2 3; do
	name=$(echo "wake confirmed set" | cut -d' ' -f$col)
	awk -v c=$col '$c ~ /^[0-9]+$/ { print $c }' /tmp/react.steps | sort -n >/tmp/react.col
	n=$(wc -l </tmp/react.col)
	[ "$n" -gt 0 ] && note "$name: p50 $(sed -n "$(((n + 1) / 2))p" /tmp/react.col) ms, max $(tail -n 1 /tmp/react.col) ms over $n trials"
done
done_checks
