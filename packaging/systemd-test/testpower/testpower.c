// SPDX-License-Identifier: GPL-2.0
/*
 * testpower — a mains adapter "AC" and a battery "BAT0" for schedpolicyd's
 * VM test, driven from user space through module parameters, each change
 * announced by power_supply_changed() as a real power_supply "change"
 * uevent.
 *
 * Debian's kernels have CONFIG_TEST_POWER unset, so the tests cannot use
 * the kernel's own test_power; this module offers the parameters the tests
 * need under the same names:
 *
 *   /sys/module/testpower/parameters/ac_online         on|off|1|0
 *   /sys/module/testpower/parameters/battery_status    charging|discharging|
 *                                                      not-charging|full|unknown
 *   /sys/module/testpower/parameters/battery_capacity  0..100 (percent)
 *
 * As on a laptop, plugging in or unplugging the adapter changes the
 * battery's status too (charging, or full at 100 %, when online;
 * discharging when offline) and both supplies send a change uevent.
 * battery_status then overrides the status alone. A value outside these
 * sets is refused with EINVAL and changes nothing.
 *
 * The battery's energy follows its capacity (energy_full 50 Wh, energy_now
 * capacity % of it, µWh as the power_supply class reports), power_now is
 * 8 W while discharging, 20 W while charging and 0 otherwise (µW), and
 * voltage_now 11.4 V (µV).
 *
 * Built against the guest kernel's headers by packaging/systemd-test/rootfs.sh
 * and loaded by battery.sh with `modprobe testpower`.
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/power_supply.h>
#include <linux/string.h>

#define TP_ENERGY_FULL_UWH 50000000
#define TP_VOLTAGE_UV 11400000
#define TP_DISCHARGE_UW 8000000
#define TP_CHARGE_UW 20000000

/* Guards the values below against a parameter write racing module exit. */
static DEFINE_MUTEX(tp_lock);
static struct power_supply *tp_ac, *tp_bat;
static bool ac_online = true;
static int battery_status = POWER_SUPPLY_STATUS_CHARGING;
static int battery_capacity = 80;

static const char *const tp_status_names[] = {
	[POWER_SUPPLY_STATUS_UNKNOWN] = "unknown",
	[POWER_SUPPLY_STATUS_CHARGING] = "charging",
	[POWER_SUPPLY_STATUS_DISCHARGING] = "discharging",
	[POWER_SUPPLY_STATUS_NOT_CHARGING] = "not-charging",
	[POWER_SUPPLY_STATUS_FULL] = "full",
};

static enum power_supply_property tp_ac_props[] = {
	POWER_SUPPLY_PROP_ONLINE,
};

static enum power_supply_property tp_bat_props[] = {
	POWER_SUPPLY_PROP_STATUS,
	POWER_SUPPLY_PROP_PRESENT,
	POWER_SUPPLY_PROP_TECHNOLOGY,
	POWER_SUPPLY_PROP_CAPACITY,
	POWER_SUPPLY_PROP_ENERGY_FULL_DESIGN,
	POWER_SUPPLY_PROP_ENERGY_FULL,
	POWER_SUPPLY_PROP_ENERGY_NOW,
	POWER_SUPPLY_PROP_POWER_NOW,
	POWER_SUPPLY_PROP_VOLTAGE_NOW,
	POWER_SUPPLY_PROP_MODEL_NAME,
	POWER_SUPPLY_PROP_MANUFACTURER,
};

static int tp_ac_get(struct power_supply *psy, enum power_supply_property psp,
		     union power_supply_propval *val)
{
	if (psp != POWER_SUPPLY_PROP_ONLINE)
		return -EINVAL;
	val->intval = READ_ONCE(ac_online);
	return 0;
}

static int tp_bat_get(struct power_supply *psy, enum power_supply_property psp,
		      union power_supply_propval *val)
{
	int status = READ_ONCE(battery_status);
	int capacity = READ_ONCE(battery_capacity);

	switch (psp) {
	case POWER_SUPPLY_PROP_STATUS:
		val->intval = status;
		break;
	case POWER_SUPPLY_PROP_PRESENT:
		val->intval = 1;
		break;
	case POWER_SUPPLY_PROP_TECHNOLOGY:
		val->intval = POWER_SUPPLY_TECHNOLOGY_LION;
		break;
	case POWER_SUPPLY_PROP_CAPACITY:
		val->intval = capacity;
		break;
	case POWER_SUPPLY_PROP_ENERGY_FULL_DESIGN:
	case POWER_SUPPLY_PROP_ENERGY_FULL:
		val->intval = TP_ENERGY_FULL_UWH;
		break;
	case POWER_SUPPLY_PROP_ENERGY_NOW:
		val->intval = TP_ENERGY_FULL_UWH / 100 * capacity;
		break;
	case POWER_SUPPLY_PROP_POWER_NOW:
		if (status == POWER_SUPPLY_STATUS_DISCHARGING)
			val->intval = TP_DISCHARGE_UW;
		else if (status == POWER_SUPPLY_STATUS_CHARGING)
			val->intval = TP_CHARGE_UW;
		else
			val->intval = 0;
		break;
	case POWER_SUPPLY_PROP_VOLTAGE_NOW:
		val->intval = TP_VOLTAGE_UV;
		break;
	case POWER_SUPPLY_PROP_MODEL_NAME:
		val->strval = "testpower battery";
		break;
	case POWER_SUPPLY_PROP_MANUFACTURER:
		val->strval = "schedpolicyd tests";
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static const struct power_supply_desc tp_ac_desc = {
	.name = "AC",
	.type = POWER_SUPPLY_TYPE_MAINS,
	.properties = tp_ac_props,
	.num_properties = ARRAY_SIZE(tp_ac_props),
	.get_property = tp_ac_get,
};

static const struct power_supply_desc tp_bat_desc = {
	.name = "BAT0",
	.type = POWER_SUPPLY_TYPE_BATTERY,
	.properties = tp_bat_props,
	.num_properties = ARRAY_SIZE(tp_bat_props),
	.get_property = tp_bat_get,
};

static char *tp_ac_supplied_to[] = { "BAT0" };

static const struct power_supply_config tp_ac_config = {
	.supplied_to = tp_ac_supplied_to,
	.num_supplicants = ARRAY_SIZE(tp_ac_supplied_to),
};

/* tp_changed announces a change of the supplies given; tp_lock is held. */
static void tp_changed(bool ac, bool bat)
{
	if (ac && tp_ac)
		power_supply_changed(tp_ac);
	if (bat && tp_bat)
		power_supply_changed(tp_bat);
}

static int tp_set_ac_online(const char *val, const struct kernel_param *kp)
{
	bool on;
	int ret = kstrtobool(val, &on);

	if (ret)
		return -EINVAL;
	mutex_lock(&tp_lock);
	WRITE_ONCE(ac_online, on);
	if (!on)
		WRITE_ONCE(battery_status, POWER_SUPPLY_STATUS_DISCHARGING);
	else if (battery_capacity >= 100)
		WRITE_ONCE(battery_status, POWER_SUPPLY_STATUS_FULL);
	else
		WRITE_ONCE(battery_status, POWER_SUPPLY_STATUS_CHARGING);
	tp_changed(true, true);
	mutex_unlock(&tp_lock);
	return 0;
}

static int tp_get_ac_online(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%s\n", READ_ONCE(ac_online) ? "on" : "off");
}

static int tp_set_battery_status(const char *val, const struct kernel_param *kp)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(tp_status_names); i++) {
		if (tp_status_names[i] && sysfs_streq(val, tp_status_names[i]))
			break;
	}
	if (i == ARRAY_SIZE(tp_status_names))
		return -EINVAL;
	mutex_lock(&tp_lock);
	WRITE_ONCE(battery_status, i);
	tp_changed(false, true);
	mutex_unlock(&tp_lock);
	return 0;
}

static int tp_get_battery_status(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%s\n", tp_status_names[READ_ONCE(battery_status)]);
}

static int tp_set_battery_capacity(const char *val, const struct kernel_param *kp)
{
	int capacity;

	if (kstrtoint(val, 10, &capacity) || capacity < 0 || capacity > 100)
		return -EINVAL;
	mutex_lock(&tp_lock);
	WRITE_ONCE(battery_capacity, capacity);
	tp_changed(false, true);
	mutex_unlock(&tp_lock);
	return 0;
}

static const struct kernel_param_ops tp_ac_online_ops = {
	.set = tp_set_ac_online,
	.get = tp_get_ac_online,
};

static const struct kernel_param_ops tp_battery_status_ops = {
	.set = tp_set_battery_status,
	.get = tp_get_battery_status,
};

static const struct kernel_param_ops tp_battery_capacity_ops = {
	.set = tp_set_battery_capacity,
	.get = param_get_int,
};

module_param_cb(ac_online, &tp_ac_online_ops, &ac_online, 0644);
MODULE_PARM_DESC(ac_online, "mains adapter AC online: on or off (default on)");
module_param_cb(battery_status, &tp_battery_status_ops, &battery_status, 0644);
MODULE_PARM_DESC(battery_status, "BAT0 status: charging, discharging, not-charging, full or unknown");
module_param_cb(battery_capacity, &tp_battery_capacity_ops, &battery_capacity, 0644);
MODULE_PARM_DESC(battery_capacity, "BAT0 capacity in percent, 0 to 100 (default 80)");

static int __init tp_init(void)
{
	struct power_supply *ac, *bat;

	ac = power_supply_register(NULL, &tp_ac_desc, &tp_ac_config);
	if (IS_ERR(ac))
		return PTR_ERR(ac);
	bat = power_supply_register(NULL, &tp_bat_desc, NULL);
	if (IS_ERR(bat)) {
		power_supply_unregister(ac);
		return PTR_ERR(bat);
	}
	mutex_lock(&tp_lock);
	tp_ac = ac;
	tp_bat = bat;
	mutex_unlock(&tp_lock);
	return 0;
}

static void __exit tp_exit(void)
{
	struct power_supply *ac, *bat;

	mutex_lock(&tp_lock);
	ac = tp_ac;
	bat = tp_bat;
	tp_ac = NULL;
	tp_bat = NULL;
	mutex_unlock(&tp_lock);
	power_supply_unregister(bat);
	power_supply_unregister(ac);
}

module_init(tp_init);
module_exit(tp_exit);

MODULE_DESCRIPTION("test AC adapter and battery driven by module parameters, for schedpolicyd's tests");
MODULE_LICENSE("GPL");
