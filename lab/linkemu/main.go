package linkemu

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// EnvVar makes a binary that links this package run the emulator instead of its own main
// (see RunIfRequested): the lab starts its own executable that way inside the wire namespace,
// and test binaries re-execute themselves the same way.
const EnvVar = "ILNP_LAB_LINKEMU"

// NoRealtimeEnv, when set, keeps the emulator at normal priority.
const NoRealtimeEnv = "ILNP_LAB_LINKEMU_NORT"

// ReadyLine is printed on stdout once every socket is bound.
const ReadyLine = "linkemu: ready"

// RunIfRequested runs Main and exits when EnvVar is set; otherwise it returns.
func RunIfRequested() {
	if os.Getenv(EnvVar) == "" {
		return
	}
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// ParseLinkArg reads "A,B,SHAPE" (both directions alike) or "A,B,SHAPE_AtoB,SHAPE_BtoA".
func ParseLinkArg(arg string) (*Link, error) {
	f := strings.Split(arg, ",")
	if len(f) != 3 && len(f) != 4 {
		return nil, fmt.Errorf("link %q: want IF_A,IF_B,SHAPE[,SHAPE_B_TO_A]", arg)
	}
	if f[0] == "" || f[1] == "" || f[0] == f[1] {
		return nil, fmt.Errorf("link %q: need two different interfaces", arg)
	}
	ab, err := ParseShape(f[2])
	if err != nil {
		return nil, err
	}
	ba := ab
	if len(f) == 4 {
		if ba, err = ParseShape(f[3]); err != nil {
			return nil, err
		}
	}
	return &Link{A: f[0], B: f[1], AtoB: ab, BtoA: ba}, nil
}

// Main runs links given as "A,B,SHAPE[,SHAPE]" arguments in the current namespace until
// SIGINT/SIGTERM, then prints per-direction counters. It asks for SCHED_FIFO so that delays
// hold on a loaded machine (timers of a normal-priority process were seen 40 ms late at load
// 7 on 2 cores); without the privilege it runs anyway and says so.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "linkemu" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: linkemu IF_A,IF_B,SHAPE[,SHAPE_B_TO_A] ...\nshapes: profile (lan, wan, wlan, wifi, 3g) and/or delay=100ms+jitter=5ms+loss=1%+rate=30M+queue=BYTES+reorder")
		return 2
	}
	var links []*Link
	for _, a := range args {
		l, err := ParseLinkArg(a)
		if err != nil {
			fmt.Fprintln(stderr, "linkemu:", err)
			return 2
		}
		links = append(links, l)
	}
	if os.Getenv(NoRealtimeEnv) != "" {
		fmt.Fprintln(stderr, "linkemu: real-time priority off ("+NoRealtimeEnv+" set)")
	} else if err := realtime(); err != nil {
		fmt.Fprintln(stderr, "linkemu: warning: no real-time priority, delays may wobble under load:", err)
	}
	for _, l := range links {
		if err := l.Open(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errs := make(chan error, len(links))
	for _, l := range links {
		go func() { errs <- l.Run(ctx) }()
	}
	fmt.Fprintln(stdout, ReadyLine)
	status := 0
	for range links {
		if err := <-errs; err != nil {
			fmt.Fprintln(stderr, err)
			status = 1
			stop()
		}
	}
	for _, l := range links {
		fmt.Fprintf(stderr, "%s->%s [%s] %s\n%s->%s [%s] %s\n", l.A, l.B, l.AtoB, &l.Stats[0], l.B, l.A, l.BtoA, &l.Stats[1])
	}
	return status
}

// realtime puts every thread of the process (and so the threads they create later) under
// SCHED_FIFO at a modest priority.
func realtime() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}
		if err := unix.SchedSetAttr(tid, attr, 0); err != nil {
			return fmt.Errorf("sched_setattr(%d): %w", tid, err)
		}
	}
	return nil
}
