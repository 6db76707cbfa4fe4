package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// emString prints a domain as "NAME CPUS FLAGS kHz:power/perf/cost[!] ...",
// "!" marking an inefficient state.
func emString(d EMPerfDomain) string {
	s := fmt.Sprintf("%s %s %#x", d.Name, d.CPUs, d.Flags)
	for _, st := range d.States {
		s += fmt.Sprintf(" %d:%d/%d/%d", st.KHz, st.Power, st.Performance, st.Cost)
		if st.Inefficient {
			s += "!"
		}
	}
	return s
}

// TestReadEnergyModelFixtures: every performance state of every domain,
// exactly as the fixtures hold them (derived in gen_topology.sh from the
// device trees and intel_pstate's rules; see each tree's README).
func TestReadEnergyModelFixtures(t *testing.T) {
	tests := []struct {
		machine string
		want    []string
	}{
		{"rk3588-mainline", []string{
			"cpu0 0-3 0x1 1008000:104713/222/4716 1200000:138699/264/5253 1416000:187459/312/6008 1608000:264885/354/7482 1800000:370386/397/9329",
			"cpu4 4-5 0x1 1200000:227448/512/4442 1416000:309622/604/5126 1608000:388409/686/5661 1800000:541008/768/7044 2016000:717575/860/8343 2208000:894801/942/9498 2400000:998400/1024/9750",
			"cpu6 6-7 0x1 1200000:227448/512/4442 1416000:309622/604/5126 1608000:388409/686/5661 1800000:541008/768/7044 2016000:717575/860/8343 2208000:894801/942/9498 2400000:998400/1024/9750",
		}},
		{"gs101", []string{
			"cpu0 0-3 0x1 300000:6055/26/2328 574000:14464/50/2892 738000:19730/65/3035 930000:29049/82/3542 1098000:38963/97/4016 1197000:44774/106/4223 1328000:53976/117/4613 1401000:59818/124/4824 1598000:77246/141/5478 1704000:88630/151/5869 1803000:103597/160/6474",
			"cpu4 4-5 0x1 400000:29085/88/3305 553000:45288/122/3712 696000:62430/153/4080 799000:76597/176/4352 910000:94908/201/4721 1024000:113600/226/5026 1197000:148980/264/5643 1328000:178004/293/6075 1491000:226271/329/6877 1663000:283670/367/7729 1836000:348897/405/8614 1999000:427730/441/9699 2130000:509780/470/10846 2253000:599556/498/12039",
			"cpu6 6-7 0x1 500000:81250/182/4464 851000:170998/311/5498 984000:211467/359/5890 1106000:264005/404/6534 1277000:330493/466/7092 1426000:406208/521/7796 1582000:493840/578/8543 1745000:606098/637/9514 1826000:667631/667/10009 2048000:837123/748/11191 2188000:982115/799/12291 2252000:1057595/823/12850 2401000:1227871/877/14000 2507000:1394283/916/15221 2630000:1601842/961/16668 2704000:1757600/988/17789 2802000:2030997/1024/19833",
		}},
		{"lnl-ultra5-226v", []string{
			"cpu0 0 0x4 2:64000000/409/4 3:64000000/614/5 4:64000000/819/6 5:64000000/1024/7",
			"cpu1 1 0x4 2:64000000/409/4 3:64000000/614/5 4:64000000/819/6 5:64000000/1024/7",
			"cpu2 2 0x4 2:64000000/409/4 3:64000000/614/5 4:64000000/819/6 5:64000000/1024/7",
			"cpu3 3 0x4 2:64000000/409/4 3:64000000/614/5 4:64000000/819/6 5:64000000/1024/7",
			"cpu4 4 0x4 2:64000000/275/2 3:64000000/413/3 4:64000000/551/4 5:64000000/689/5",
			"cpu5 5 0x4 2:64000000/275/2 3:64000000/413/3 4:64000000/551/4 5:64000000/689/5",
			"cpu6 6 0x4 2:64000000/275/2 3:64000000/413/3 4:64000000/551/4 5:64000000/689/5",
			"cpu7 7 0x4 2:64000000/275/2 3:64000000/413/3 4:64000000/551/4 5:64000000/689/5",
		}},
		// An older layout: no flags, cost or inefficient files.
		{"apple-m1", []string{
			"cpu0 0-3 -0x1 600000:47296/133/0 2064000:412979/459/0",
			"cpu4 4-7 -0x1 600000:290230/192/0 3204000:4951324/1024/0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			fsys, err := NewFS(filepath.Join("testdata", "topology", tt.machine))
			if err != nil {
				t.Fatal(err)
			}
			pds, err := fsys.ReadEnergyModel()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range pds {
				got = append(got, emString(d))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if art := pds[0].Artificial(); art != (tt.machine == "lnl-ultra5-226v") {
				t.Errorf("Artificial() = %v", art)
			}
		})
	}
}

// TestReadEnergyModelAbsent: no debugfs below the root (the machines
// without one, and rk3588's sbc-bench dump) is ErrNoEnergyModel.
func TestReadEnergyModelAbsent(t *testing.T) {
	for _, m := range []string{"rk3588", "adl-p-i7-1260p", "strix-point-hx370"} {
		fsys, _ := NewFS(filepath.Join("testdata", "topology", m))
		if _, err := fsys.ReadEnergyModel(); !errors.Is(err, ErrNoEnergyModel) {
			t.Errorf("%s: err = %v, want ErrNoEnergyModel", m, err)
		}
	}
}

// TestReadEnergyModelBad: malformed trees are refused with the file named,
// and nothing is returned.
func TestReadEnergyModelBad(t *testing.T) {
	good := map[string]string{"cpu0/cpus": "0-1", "cpu0/flags": "0x1", "cpu0/ps:1000/frequency": "1000", "cpu0/ps:1000/power": "5", "cpu0/ps:1000/performance": "100"}
	tests := []struct {
		name, file, value, want string
	}{
		{"bad cpus", "cpu0/cpus", "zz", "cpu0/cpus"},
		{"bad flags", "cpu0/flags", "0xq", "cpu0/flags"},
		{"negative power", "cpu0/ps:1000/power", "-5", "cpu0/ps:1000/power"},
		{"huge power", "cpu0/ps:1000/power", "99999999999999", "out of range"},
		{"frequency disagrees", "cpu0/ps:1000/frequency", "2000", "ps:1000"},
		{"bad state name", "cpu0/ps:x/power", "1", "not a frequency"},
		{"two domains share a CPU", "cpu1/cpus", "1", "another domain"},
		{"domain without state", "cpu2/cpus", "2", "no performance state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{tt.file: tt.value}
			for k, v := range good {
				if _, ok := files[k]; !ok {
					files[k] = v
				}
			}
			if tt.file == "cpu1/cpus" {
				files["cpu1/ps:5/power"] = "1"
			}
			for k, v := range files {
				p := filepath.Join(root, "kernel/debug/energy_model", k)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fsys, _ := NewFS(root)
			pds, err := fsys.ReadEnergyModel()
			if err == nil || !strings.Contains(err.Error(), tt.want) || pds != nil {
				t.Errorf("got %v, %v; want an error naming %q", pds, err, tt.want)
			}
		})
	}
}

// TestCPUFreqStatesAndPart: cpufreq's table where the driver has one,
// else its minimum and maximum; MIDR_EL1's implementer and part.
func TestCPUFreqStatesAndPart(t *testing.T) {
	rk, _ := NewFS(filepath.Join("testdata", "topology", "rk3588"))
	khz, from, err := rk.CPUFreqStates(4)
	if err != nil || from != "scaling_available_frequencies" || fmt.Sprint(khz) != "[408000 600000 816000 1008000 1200000 1416000 1608000 1800000 2016000 2208000]" {
		t.Errorf("rk3588 cpu4: %v from %q, %v", khz, from, err)
	}
	if p, err := rk.CPUPartOf(0); err != nil || p != (CPUPart{0x41, 0xd05}) || p.String() != "0x41:0xd05" {
		t.Errorf("rk3588 cpu0 part %v, %v", p, err)
	}
	if p, err := rk.CPUPartOf(7); err != nil || p != (CPUPart{0x41, 0xd0b}) {
		t.Errorf("rk3588 cpu7 part %v, %v", p, err)
	}
	lnl, _ := NewFS(filepath.Join("testdata", "topology", "lnl-ultra5-226v"))
	if khz, from, err := lnl.CPUFreqStates(0); err != nil || from != "cpuinfo_min_freq/cpuinfo_max_freq" || fmt.Sprint(khz) != "[4500000]" {
		t.Errorf("lnl cpu0: %v from %q, %v", khz, from, err)
	}
	if _, err := lnl.CPUPartOf(0); err == nil {
		t.Error("an x86 tree has no MIDR_EL1")
	}
	if _, _, err := rk.CPUFreqStates(99); err == nil {
		t.Error("a CPU without cpufreq has no frequencies")
	}
}
