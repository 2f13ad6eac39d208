package datapath

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"ilnp/internal/nstest"
)

func mountBPFFS(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount bpffs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return filepath.Join(mnt, "ilnp")
}

// With KeepPinned the TCX links stay attached after Close; the next datapath takes them over
// with a link update (one program per direction throughout, now the new one), and Flush
// detaches everything and removes every pin.
func TestPinnedLinksSurvive(t *testing.T) {
	nstest.RequireRoot(t)
	dir := mountBPFFS(t)
	ns := nstest.New(t, "dpPin")
	ns.Run("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	idx := ns.Ifindex("v0")
	progs := func() (ids []ebpf.ProgramID) {
		t.Helper()
		must(t, ns.Do(func() error {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: at})
				if err != nil {
					return err
				}
				for _, p := range r.Programs {
					ids = append(ids, p.ID)
				}
			}
			return nil
		}))
		return ids
	}
	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, ns.Do(func() error { return d.Attach(idx) }))
	first := progs()
	must(t, d.PutSession(Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA1, RemoteView: lB1}))
	must(t, d.Close())
	if got := progs(); len(got) != 2 || got[0] != first[0] || got[1] != first[1] {
		t.Fatalf("after Close with KeepPinned: programs %v, want %v still attached", got, first)
	}

	d, err = Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, ns.Do(func() error { return d.Attach(idx) }))
	if d.Adopted() != 2 {
		t.Fatalf("Adopted() = %d, want both links taken over", d.Adopted())
	}
	second := progs()
	if len(second) != 2 || second[0] == first[0] || second[1] == first[1] {
		t.Fatalf("after the takeover: programs %v (before %v), want two new ones in place of the old", second, first)
	}
	if _, err := d.GetSession(nidA, nidB); err != nil {
		t.Fatalf("session not kept across the takeover: %v", err)
	}
	must(t, d.Flush())
	if got := progs(); len(got) != 0 {
		t.Fatalf("after Flush: programs %v still attached", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(dir)
		t.Fatalf("pin directory left after Flush: %v %v", err, ents)
	}
}

// Pinned maps of another layout are refused with the documented message, and so are pinned
// maps without a layout record; FlushPinned is the way out.
func TestLayoutMismatch(t *testing.T) {
	nstest.RequireRoot(t)
	dir := mountBPFFS(t)
	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	must(t, d.Close())
	layout, err := Layout()
	must(t, err)
	if !strings.HasPrefix(layout, "v1-") || len(layout) != len("v1-")+16 {
		t.Fatalf("Layout() = %q", layout)
	}
	must(t, writeLayout(dir, "v0-0123456789abcdef"))
	_, err = Load(Options{PinDir: dir, KeepPinned: true})
	want := "the maps pinned in " + dir + " have layout v0-0123456789abcdef, this ilnpd needs " + layout +
		"; their sessions cannot be adopted: run `ilnpd -flush -config FILE` (ends them) and start ilnpd again"
	if !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load over another layout: %v\nwant ErrLayoutMismatch with %q", err, want)
	}
	must(t, unpinLayout(dir))
	if _, err = Load(Options{PinDir: dir, KeepPinned: true}); !errors.Is(err, ErrLayoutMismatch) ||
		!strings.Contains(err.Error(), "have layout none recorded") {
		t.Fatalf("Load over pinned maps without a layout record: %v", err)
	}
	must(t, FlushPinned(dir))
	d, err = Load(Options{PinDir: dir})
	must(t, err)
	must(t, d.Close())
}

func TestEntries(t *testing.T) {
	nstest.RequireRoot(t)
	d := newDatapath(t, Options{})
	must(t, d.PutSession(Session{LocalNID: nidA, RemoteNID: nidB, LocalView: lA1, RemoteView: lB1, RemoteNonce: mustNonce(t, 1, 2, 3, 4)}))
	got, err := d.Entries()
	must(t, err)
	if got["sessions"] != 1 || got["peers"] != 0 {
		t.Fatalf("Entries() = %v, want one session", got)
	}
}
