package tcpaware

import (
	"errors"
	"fmt"
	"os"
	"time"

	"ilnp/internal/structops"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The cubic wrapper (struct_ops tcp_congestion_ops in bpf/tcpaware.c) is registered under a
// name of its own per daemon (struct_ops names are kernel-wide and several daemons share a
// kernel in the lab). It is never made a default: the iterator moves a cubic socket to it at
// the end of a move, and it behaves as cubic outside the loss window.
type wrapper struct {
	name  string
	ops   *ebpf.Map
	progs []*ebpf.Program
	link  link.Link
}

func closeProgs(progs []*ebpf.Program) {
	for _, p := range progs {
		if p != nil {
			p.Close()
		}
	}
}

func ccName(name string) tcpawareBPFTcpawareCc {
	var v tcpawareBPFTcpawareCc
	for i := 0; i < len(name) && i < len(v.Name)-1; i++ {
		v.Name[i] = int8(name[i])
	}
	return v
}

func loadWrapper(spec *ebpf.CollectionSpec, counters, socks *ebpf.Map) (*wrapper, error) {
	name := fmt.Sprintf("ilnpcub%d", os.Getpid()%10000000)
	if reg, err := structops.Registered(name); err != nil {
		return nil, err
	} else if reg {
		return nil, fmt.Errorf("tcpaware: congestion control %q already registered", name)
	}
	spec = spec.Copy()
	if err := structops.SetName(spec.Maps["tcpaware_cubic"], name); err != nil {
		return nil, err
	}
	// The programs are named so that they load with the map that refers to them.
	var objs struct {
		Ops       *ebpf.Map     `ebpf:"tcpaware_cubic"`
		Init      *ebpf.Program `ebpf:"ta_init"`
		Ssthresh  *ebpf.Program `ebpf:"ta_ssthresh"`
		CongAvoid *ebpf.Program `ebpf:"ta_cong_avoid"`
		CongCtl   *ebpf.Program `ebpf:"ta_cong_control"`
		SetState  *ebpf.Program `ebpf:"ta_set_state"`
		CwndEvent *ebpf.Program `ebpf:"ta_cwnd_event"`
		PktsAcked *ebpf.Program `ebpf:"ta_pkts_acked"`
		UndoCwnd  *ebpf.Program `ebpf:"ta_undo_cwnd"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"tcpaware_counters": counters, "tcpaware_sks": socks}}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("tcpaware: load cubic wrapper: %w", err)
	}
	progs := []*ebpf.Program{objs.Init, objs.Ssthresh, objs.CongAvoid, objs.CongCtl, objs.SetState, objs.CwndEvent, objs.PktsAcked, objs.UndoCwnd}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: objs.Ops})
	if err != nil {
		objs.Ops.Close()
		closeProgs(progs)
		return nil, fmt.Errorf("tcpaware: register cubic wrapper as %q: %w", name, err)
	}
	return &wrapper{name: name, ops: objs.Ops, progs: progs, link: l}, nil
}

// close unregisters the wrapper and waits (up to 2 s) until the kernel no longer lists it.
// Sockets still on it keep it until they close.
func (w *wrapper) close() error {
	err := w.link.Close()
	w.ops.Close()
	closeProgs(w.progs)
	if werr := structops.WaitUnregistered(w.name, 2*time.Second); werr != nil {
		return errors.Join(err, fmt.Errorf("tcpaware: %w", werr))
	}
	return err
}
