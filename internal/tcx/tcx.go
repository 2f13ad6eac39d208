// Package tcx keeps the TCX links a datapath attached, per interface: attach a program pair
// once per interface, detach one interface, detach them all on close.
package tcx

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Links are the TCX links attached per interface index. The zero value is ready; its methods
// are safe for concurrent use.
type Links struct {
	mu sync.Mutex
	m  map[int][]link.Link
}

// Attach attaches ingress and egress (either may be nil) to the interface, in the network
// namespace of the calling thread. An interface is attached once: a second Attach fails until
// Detach. When one program fails to attach, none stays attached.
func (s *Links) Attach(ifindex int, ingress, egress *ebpf.Program) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ifindex]; ok {
		return fmt.Errorf("interface %d already attached", ifindex)
	}
	var ls []link.Link
	for _, p := range []struct {
		prog *ebpf.Program
		at   ebpf.AttachType
		name string
	}{{ingress, ebpf.AttachTCXIngress, "ingress"}, {egress, ebpf.AttachTCXEgress, "egress"}} {
		if p.prog == nil {
			continue
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.prog, Attach: p.at})
		if err != nil {
			closeAll(ls)
			return fmt.Errorf("attach %s to interface %d: %w", p.name, ifindex, err)
		}
		ls = append(ls, l)
	}
	if s.m == nil {
		s.m = map[int][]link.Link{}
	}
	s.m[ifindex] = ls
	return nil
}

// Detach removes the interface's programs (also pinned ones). attached is false when the
// interface had none.
func (s *Links) Detach(ifindex int) (attached bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.m[ifindex]
	if !ok {
		return false, nil
	}
	delete(s.m, ifindex)
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Unpin())
	}
	return true, errors.Join(append(errs, closeAll(ls))...)
}

// Close detaches every interface, except links pinned with AttachPinned: those stay attached
// until Unpin.
func (s *Links) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for ifindex, ls := range s.m {
		errs = append(errs, closeAll(ls))
		delete(s.m, ifindex)
	}
	return errors.Join(errs...)
}

func closeAll(ls []link.Link) error {
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}
