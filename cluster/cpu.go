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
// by name, with every process it started: PostgreSQL's backends (which leave its process
// group for sessions of their own) and any other descendant count with their ancestor.
// Taken before and after a load, the difference is what each part of the cluster spent on it
// (the soak's sizing figures, docs/deploy.md). It reads /proc, so it is empty off Linux; a
// process that restarted in between starts again from zero, and a descendant that ended
// meanwhile takes its time with it.
func (c *Cluster) CPUSeconds() map[string]float64 {
	roots := map[int]string{}
	for _, name := range c.order {
		if pid := c.Pid(name); pid != 0 {
			roots[pid] = name
		}
	}
	type stat struct {
		ppid  int
		ticks int64
	}
	procs := map[int]stat{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended meanwhile
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		if ppid, ticks, ok := parseStat(b); ok {
			procs[pid] = stat{ppid, ticks}
		}
	}
	out := map[string]float64{}
	for pid, st := range procs {
		// Walk up to a cluster process; pid 1 and unknown parents end the walk.
		for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
			if name, ok := roots[p]; ok {
				out[name] += float64(st.ticks) / clockTicks
				break
			}
			p = procs[p].ppid
		}
	}
	return out
}

// descendants lists the processes below pid, from /proc; none when pid is 0.
func descendants(pid int) []int {
	if pid == 0 {
		return nil
	}
	children := map[int][]int{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		if ppid, _, ok := parseStat(b); ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// parseStat reads the parent pid and utime+stime from one /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces, so fields are counted from
// the last ')'.
func parseStat(b []byte) (ppid int, ticks int64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(3) ppid(4) pgrp(5) … utime(14) stime(15); f[0] is field 3.
	if len(f) < 13 {
		return 0, 0, false
	}
	pp, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return pp, ut + st, true
}
