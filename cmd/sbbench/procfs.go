package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// clockTick is USER_HZ; 100 on every Linux this runs on.
const clockTick = 100

// snapshot is CPU time in milliseconds: each switchboard process, the
// infrastructure processes on this machine (postgres, redis-server,
// nats-server; shared with anything else using them) and the whole machine.
type snapshot struct {
	procCPU    map[string]float64
	infraCPU   float64
	infraBy    map[string]float64 // by command name
	selfCPU    float64            // this load generator
	machineCPU float64
}

func (s *system) snapshot() snapshot {
	sn := snapshot{procCPU: map[string]float64{}, infraBy: map[string]float64{}}
	for _, p := range s.procs {
		sn.procCPU[p.name] = procCPUms(p.cmd.Process.Pid)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		switch name := strings.TrimSpace(string(comm)); name {
		case "postgres", "redis-server", "nats-server":
			ms := procCPUms(pid)
			sn.infraCPU += ms
			sn.infraBy[name] += ms
		}
	}
	sn.selfCPU = procCPUms(os.Getpid())
	sn.machineCPU = machineBusyMs()
	return sn
}

// procCPUms is utime+stime of a process in milliseconds.
func procCPUms(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) * 1000 / clockTick
}

// machineBusyMs is the busy CPU time of the machine from /proc/stat.
func machineBusyMs() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	var busy float64
	for i, v := range fields[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already in user
			break
		}
		busy += n
	}
	return busy * 1000 / clockTick
}

type status struct{ rssMB, hwmMB float64 }

// readStatus reads VmRSS and VmHWM (peak resident set) of a process.
func readStatus(pid int) status {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return status{}
	}
	var st status
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			st.rssMB = round2(kb / 1024)
		case "VmHWM":
			st.hwmMB = round2(kb / 1024)
		}
	}
	return st
}

func hostInfo() map[string]any {
	h := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				_, v, _ := strings.Cut(line, ":")
				h["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h["loadavg_at_start"] = strings.TrimSpace(string(b))
	}
	return h
}
