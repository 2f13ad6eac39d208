// Package cc loads the lab's BPF congestion controls, TCP Hybla and TCP Veno (bpf/*.c), as
// struct_ops tcp_congestion_ops. Each is registered through a struct_ops link under a name a
// socket chooses with TCP_CONGESTION (iperf3 -C NAME); it is never made a namespace default
// (a failed attempt at that once left a struct_ops object the kernel could not free, see
// ../shared/notes/platform.md). Close unregisters it. The registration is kernel-wide, not per
// network namespace: one load serves every namespace of the lab.
package cc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"ilnp/internal/structops"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The algorithms this package builds.
const (
	Hybla = "hybla"
	Veno  = "veno"
)

// Names of the congestion controls the lab offers: the kernel's cubic and bbr, and ours.
var Names = []string{"cubic", Hybla, Veno, "bbr"}

// IsBPF says whether name is one of this package's programs (which must be loaded first).
func IsBPF(name string) bool { return name == Hybla || name == Veno }

// Valid checks a --congestion value.
func Valid(name string) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("unknown congestion control %q (want one of %s)", name, strings.Join(Names, ", "))
	}
	return nil
}

// Counter indices (enum cc_counter in bpf/cc.h).
const (
	CounterInit = iota
	CounterRelease
	CounterAcks
	CounterSSAcks
	CounterSamples
	CounterLosses
	CounterRandom
	CounterCongestive
	CounterLossState
	CounterCwndEvent
	CounterTrace
	CounterMaxCwnd
	CounterLastRho
	numCounters
)

// CounterNames name the counters for reports and JSON.
var CounterNames = [numCounters]string{"init", "release", "acks", "ss_acks", "rtt_samples", "losses",
	"losses_random", "losses_congestive", "rto_loss_state", "cwnd_events", "trace_steps", "max_cwnd", "last_rho_16ths"}

// Counters is a snapshot of a program's counters.
type Counters [numCounters]uint64

// Map returns the counters by name.
func (c Counters) Map() map[string]uint64 {
	m := make(map[string]uint64, len(c))
	for i, v := range c {
		m[CounterNames[i]] = v
	}
	return m
}

// TraceLen is how many steps the programs keep (CC_TRACE_LEN).
const TraceLen = 1024

// Step is one traced arithmetic step (struct cc_step).
type Step = hyblaBPFCcStep

// Loaded is a registered congestion control.
type Loaded struct {
	Algo, Name string
	coll       *ebpf.Collection
	link       link.Link
}

// Load registers algo (Hybla or Veno) under name (empty: algo itself; at most 15 bytes).
func Load(algo, name string) (*Loaded, error) {
	if name == "" {
		name = algo
	}
	if len(name) > 15 || name == "" || strings.ContainsAny(name, " \x00") {
		return nil, fmt.Errorf("congestion control name %q: 1-15 bytes without spaces", name)
	}
	var spec *ebpf.CollectionSpec
	var err error
	switch algo {
	case Hybla:
		spec, err = loadHyblaBPF()
	case Veno:
		spec, err = loadVeno()
	default:
		return nil, fmt.Errorf("no BPF congestion control %q (have %s, %s)", algo, Hybla, Veno)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", algo, err)
	}
	if err := structops.SetName(spec.Maps[algo], name); err != nil {
		return nil, fmt.Errorf("%s: %w", algo, err)
	}
	if reg, err := structops.Registered(name); err != nil {
		return nil, err
	} else if reg {
		return nil, fmt.Errorf("congestion control %q is already registered (another lab run?)", name)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", algo, err)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: coll.Maps[algo]})
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("register %s as %q: %w", algo, name, err)
	}
	return &Loaded{Algo: algo, Name: name, coll: coll, link: l}, nil
}

// Close unregisters the algorithm (closing the struct_ops link) and frees the programs; it
// then waits (up to 2 s) until the kernel no longer lists the name. Sockets still using it
// keep their copy until they close.
func (l *Loaded) Close() error {
	if l == nil || l.link == nil {
		return nil
	}
	err := l.link.Close()
	l.link = nil
	l.coll.Close()
	if werr := structops.WaitUnregistered(l.Name, 2*time.Second); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return fmt.Errorf("unregister %q: %w", l.Name, err)
	}
	return nil
}

// Counters reads the program's counters.
func (l *Loaded) Counters() (Counters, error) {
	var c Counters
	m := l.coll.Maps["counters"]
	for i := range c {
		if err := m.Lookup(uint32(i), &c[i]); err != nil {
			return c, fmt.Errorf("%s counter %s: %w", l.Name, CounterNames[i], err)
		}
	}
	return c, nil
}

// Trace reads the steps the program kept (the first TraceLen after loading).
func (l *Loaded) Trace() ([]Step, error) {
	c, err := l.Counters()
	if err != nil {
		return nil, err
	}
	n := min(c[CounterTrace], TraceLen)
	steps := make([]Step, n)
	m := l.coll.Maps["trace"]
	for i := range steps {
		if err := m.Lookup(uint32(i), &steps[i]); err != nil {
			return nil, fmt.Errorf("%s trace[%d]: %w", l.Name, i, err)
		}
	}
	return steps, nil
}
