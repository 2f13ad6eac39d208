package tcpaware

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
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

const availablePath = "/proc/sys/net/ipv4/tcp_available_congestion_control"

func registered(name string) (bool, error) {
	b, err := os.ReadFile(availablePath)
	if err != nil {
		return false, fmt.Errorf("tcpaware: congestion controls: %w", err)
	}
	return slices.Contains(strings.Fields(string(b)), name), nil
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
	if reg, err := registered(name); err != nil {
		return nil, err
	} else if reg {
		return nil, fmt.Errorf("tcpaware: congestion control %q already registered", name)
	}
	spec = spec.Copy()
	if err := setOpsName(spec.Maps["tcpaware_cubic"], name); err != nil {
		return nil, err
	}
	// The programs are named so that they load with the map that refers to them.
	var objs struct {
		Ops       *ebpf.Map     `ebpf:"tcpaware_cubic"`
		Init      *ebpf.Program `ebpf:"ta_init"`
		Ssthresh  *ebpf.Program `ebpf:"ta_ssthresh"`
		CongAvoid *ebpf.Program `ebpf:"ta_cong_avoid"`
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
	progs := []*ebpf.Program{objs.Init, objs.Ssthresh, objs.CongAvoid, objs.SetState, objs.CwndEvent, objs.PktsAcked, objs.UndoCwnd}
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
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reg, rerr := registered(w.name)
		if rerr != nil || !reg {
			return errors.Join(err, rerr)
		}
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("tcpaware: %q still registered after closing its link", w.name))
		}
	}
}

// setOpsName writes name into the struct_ops value's name[16] before loading.
func setOpsName(ms *ebpf.MapSpec, name string) error {
	if ms == nil || ms.Type != ebpf.StructOpsMap || len(ms.Contents) != 1 {
		return errors.New("tcpaware: no struct_ops map in the object")
	}
	st, ok := ms.Value.(*btf.Struct)
	if !ok {
		return fmt.Errorf("tcpaware: struct_ops value is %T, not a struct", ms.Value)
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("tcpaware: struct_ops contents are %T", ms.Contents[0].Value)
	}
	for _, m := range st.Members {
		if m.Name != "name" {
			continue
		}
		off := int(m.Offset.Bytes())
		if off+16 > len(val) {
			return errors.New("tcpaware: struct_ops name beyond the value")
		}
		var buf [16]byte
		copy(buf[:15], name)
		copy(val[off:off+16], buf[:])
		return nil
	}
	return errors.New("tcpaware: struct_ops value has no name member")
}
