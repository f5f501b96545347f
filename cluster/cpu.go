package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times; 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds returns the CPU time (user and system) each running process has used so far,
// by name, summed over its whole process group: PostgreSQL's backends and Temporal's
// children count with their parent. Taken before and after a load, the difference is what
// each part of the cluster spent on it (the soak's sizing figures, docs/deploy.md). It
// reads /proc, so it is empty off Linux; a process that restarted in between starts again
// from zero, and the difference is then not meaningful for it.
func (c *Cluster) CPUSeconds() map[string]float64 {
	groups := map[int]string{}
	for _, name := range c.order {
		if pid := c.Pid(name); pid != 0 {
			groups[pid] = name
		}
	}
	out := map[string]float64{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended meanwhile
		}
		pgrp, ticks, ok := parseStat(b)
		if !ok {
			continue
		}
		if name, ok := groups[pgrp]; ok {
			out[name] += float64(ticks) / clockTicks
		}
	}
	return out
}

// parseStat reads the process group and utime+stime from one /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces, so fields are counted from
// the last ')'.
func parseStat(b []byte) (pgrp int, ticks int64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(3) ppid(4) pgrp(5) … utime(14) stime(15); f[0] is field 3.
	if len(f) < 13 {
		return 0, 0, false
	}
	pg, err1 := strconv.Atoi(f[2])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return pg, ut + st, true
}
