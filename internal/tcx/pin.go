package tcx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// linkPrefix starts the names of the links AttachPinned pins.
const linkPrefix = "tcx_"

// PinName is the name under which AttachPinned pins the link of one direction ("ingress" or
// "egress") on an interface.
func PinName(ifindex int, direction string) string {
	return fmt.Sprintf("%s%d_%s", linkPrefix, ifindex, direction)
}

// AttachPinned is Attach with the links pinned in pinDir (a bpffs directory): a pinned link
// stays attached after the process ends, so the datapath keeps running while its daemon
// restarts. A link already pinned there for the interface and direction is taken over and
// given the new program with a link update, which the kernel swaps atomically: no packet
// passes without a program. adopted counts the links taken over. Close leaves pinned links
// attached; Detach and Unpin remove them.
func (s *Links) AttachPinned(ifindex int, ingress, egress *ebpf.Program, pinDir string) (adopted int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ifindex]; ok {
		return 0, fmt.Errorf("interface %d already attached", ifindex)
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
		path := filepath.Join(pinDir, PinName(ifindex, p.name))
		l, took, err := takeOver(path, ifindex, p.prog)
		if err != nil {
			closeAll(ls)
			return 0, fmt.Errorf("%s of interface %d: %w", p.name, ifindex, err)
		}
		if !took {
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.prog, Attach: p.at})
			if err != nil {
				closeAll(ls)
				return 0, fmt.Errorf("attach %s to interface %d: %w", p.name, ifindex, err)
			}
			if err := l.Pin(path); err != nil {
				_ = l.Close()
				closeAll(ls)
				return 0, fmt.Errorf("pin %s link of interface %d: %w", p.name, ifindex, err)
			}
		} else {
			adopted++
		}
		ls = append(ls, l)
	}
	if s.m == nil {
		s.m = map[int][]link.Link{}
	}
	s.m[ifindex] = ls
	return adopted, nil
}

// takeOver opens the link pinned at path and, if it is still attached to ifindex, updates it
// to prog. A pin of a link whose interface is gone (the kernel then detaches it) is removed.
func takeOver(path string, ifindex int, prog *ebpf.Program) (link.Link, bool, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, false, nil
	}
	info, err := l.Info()
	if err != nil || info.TCX() == nil || int(info.TCX().Ifindex) != ifindex {
		_ = l.Unpin()
		_ = l.Close()
		return nil, false, nil
	}
	if err := l.Update(prog); err != nil {
		_ = l.Close()
		return nil, false, fmt.Errorf("update pinned link %s: %w", path, err)
	}
	return l, true, nil
}

// Unpin detaches every interface and removes the pins of the links, also of links this
// process did not open (a previous daemon's, found by name in pinDir). A link is detached when
// its pin goes and no process holds it.
func (s *Links) Unpin(pinDir string) error {
	s.mu.Lock()
	var errs []error
	for ifindex, ls := range s.m {
		for _, l := range ls {
			errs = append(errs, l.Unpin())
		}
		errs = append(errs, closeAll(ls))
		delete(s.m, ifindex)
	}
	s.mu.Unlock()
	if pinDir == "" {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, UnpinDir(pinDir))...)
}

// UnpinDir removes the pins of every link AttachPinned left in pinDir.
func UnpinDir(pinDir string) error {
	ents, err := os.ReadDir(pinDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tcx: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), linkPrefix) {
			if err := os.Remove(filepath.Join(pinDir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("tcx: unpin %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// UnpinOthers removes the pins of links in pinDir on interfaces not in keep (an interface
// taken out of the configuration while the daemon was down): their programs are detached.
func UnpinOthers(pinDir string, keep map[int]bool) (int, error) {
	ents, err := os.ReadDir(pinDir)
	if err != nil {
		return 0, fmt.Errorf("tcx: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		var ifindex int
		var dir string
		if _, err := fmt.Sscanf(strings.ReplaceAll(e.Name(), "_", " "), "tcx %d %s", &ifindex, &dir); err != nil || keep[ifindex] {
			continue
		}
		if err := os.Remove(filepath.Join(pinDir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("tcx: unpin %s: %w", e.Name(), err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
