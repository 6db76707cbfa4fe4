#!/usr/bin/python3
"""Run the real upowerd on a umockdev testbed with a fake AC adapter and
battery, on the D-Bus given by --bus (a private bus used as the system bus).

Run it under umockdev-wrapper (which preloads libumockdev-preload), as
upower's own integration test runs: the preload lets this process send
uevents to the testbed and lets upowerd (which inherits it) see the
testbed's /sys. Used by acpi/upower_test.go. Protocol on stdout: "ROOT <dir>" (the testbed
root; its sys/ is a sysfs tree) then "READY" once UPower answers on the bus.
Commands on stdin, each answered with "OK <cmd>": "unplug" (AC offline,
battery Discharging, change uevents), "plug" (the reverse), "quit". EOF
also quits; upowerd is stopped on exit.

Needs: upower, umockdev (umockdev-wrapper), gir1.2-umockdev-1.0, python3-gi.
The upowerd under test is the installed one, started the way upower's own
integration test starts it (UMOCKDEV_DIR, DBUS_SYSTEM_BUS_ADDRESS, -r).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import gi

gi.require_version("UMockdev", "1.0")
from gi.repository import Gio, GLib, UMockdev  # noqa: E402

UP = "org.freedesktop.UPower"
UP_PATH = "/org/freedesktop/UPower"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bus", required=True, help="D-Bus address used as the system bus")
    ap.add_argument("--upowerd", default="/usr/libexec/upowerd")
    args = ap.parse_args()

    testbed = UMockdev.Testbed.new()
    ac = testbed.add_device("power_supply", "AC", None, ["type", "Mains", "online", "1"], [])
    bat = testbed.add_device(
        "power_supply", "BAT0", None,
        ["type", "Battery", "present", "1", "status", "Charging",
         "energy_full", "60000000", "energy_full_design", "80000000",
         "energy_now", "48000000", "voltage_now", "12000000"], [])

    history = tempfile.mkdtemp(prefix="upower-history-")
    cfg = tempfile.NamedTemporaryFile(prefix="upower-cfg-", delete=False)
    cfg.close()
    env = dict(os.environ)
    env["UMOCKDEV_DIR"] = testbed.get_root_dir()
    env["DBUS_SYSTEM_BUS_ADDRESS"] = args.bus
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env["UPOWER_HISTORY_DIR"] = history
    env["UPOWER_CONF_FILE_NAME"] = cfg.name
    env["SYSTEMD_DEVICE_VERIFY_SYSFS"] = "0"
    if "umockdev" not in env.get("LD_PRELOAD", ""):
        print("run me under umockdev-wrapper", file=sys.stderr, flush=True)
        sys.exit(2)
    daemon = subprocess.Popen([args.upowerd, "-v", "-r"], env=env,
                              stdout=sys.stderr, stderr=sys.stderr)
    try:
        bus = Gio.DBusConnection.new_for_address_sync(
            args.bus,
            Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
            None, None)
        print("ROOT " + testbed.get_root_dir(), flush=True)
        for _ in range(200):
            if daemon.poll() is not None:
                print("upowerd exited with %d" % daemon.returncode, file=sys.stderr, flush=True)
                sys.exit(1)
            try:
                bus.call_sync(UP, UP_PATH, "org.freedesktop.DBus.Properties", "Get",
                              GLib.Variant("(ss)", (UP, "DaemonVersion")), None,
                              Gio.DBusCallFlags.NO_AUTO_START, 1000, None)
                break
            except GLib.Error:
                time.sleep(0.05)
        else:
            print("upowerd did not answer within 10s", file=sys.stderr, flush=True)
            sys.exit(1)
        print("READY", flush=True)

        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "unplug":
                testbed.set_attribute(ac, "online", "0")
                testbed.set_attribute(bat, "status", "Discharging")
            elif cmd == "plug":
                testbed.set_attribute(ac, "online", "1")
                testbed.set_attribute(bat, "status", "Charging")
            elif cmd == "quit":
                print("OK quit", flush=True)
                break
            else:
                print("ERR unknown command %r" % cmd, flush=True)
                continue
            testbed.uevent(ac, "change")
            testbed.uevent(bat, "change")
            print("OK " + cmd, flush=True)
    finally:
        daemon.terminate()
        try:
            daemon.wait(5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(history, ignore_errors=True)
        os.unlink(cfg.name)


if __name__ == "__main__":
    main()
