package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Usage is what a process has used since it started, from /proc.
type Usage struct {
	// CPUSeconds is its user and system CPU time.
	CPUSeconds float64
	// RSS is its resident set size now, PeakRSS the highest it reached (VmHWM), in bytes.
	RSS, PeakRSS int64
}

// UsageOf reads the usage of the process pid from /proc; it fails where /proc is not Linux's.
func UsageOf(pid int) (Usage, error) {
	var u Usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	if u.CPUSeconds, err = cpuSeconds(stat); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		for field, dst := range map[string]*int64{"VmHWM:": &u.PeakRSS, "VmRSS:": &u.RSS} {
			if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
				kib, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				if err != nil {
					return u, fmt.Errorf("/proc/%d/status: %s %w", pid, field, err)
				}
				*dst = kib * 1024
			}
		}
	}
	if u.RSS == 0 || u.PeakRSS == 0 {
		return u, fmt.Errorf("/proc/%d/status: no VmHWM/VmRSS", pid)
	}
	return u, nil
}

// cpuSeconds reads utime and stime from the contents of /proc/<pid>/stat.
func cpuSeconds(stat []byte) (float64, error) {
	// The fields after the command, which is parenthesised and may contain spaces and parentheses: utime and
	// stime are the 12th and 13th, in clock ticks of (on Linux, always) 100 Hz.
	i := bytes.LastIndex(stat, []byte(") "))
	if i < 0 {
		return 0, fmt.Errorf("no command field in %q", stat)
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command, want 13 or more", len(f))
	}
	ut, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, err
	}
	st, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, err
	}
	return (ut + st) / 100, nil
}

// Usage reads the process's usage; see UsageOf.
func (p *Process) Usage() (Usage, error) { return UsageOf(p.Pid()) }
