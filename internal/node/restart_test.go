package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"ilnp/internal/bpffs"
	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
)

// flows are a TCP byte stream (CN -> MN, the checked pattern) and a UDP echo flow (CN -> MN
// -> CN, one datagram every udpEvery) over the ILNP session, run in-process through the
// namespaces.
type flows struct {
	cancel   context.CancelFunc
	tcp      net.Conn
	written  atomic.Int64
	received atomic.Int64
	readErr  chan error
	writeErr chan error

	udp *nstest.EchoProbe
}

const udpEvery = 5 * time.Millisecond

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// startFlows opens both flows to "mn" as the CN's resolver answers it.
func (n *testNet) startFlows(t *testing.T) *flows {
	t.Helper()
	addr, err := resolve(n.CN, "mn")
	if err != nil {
		t.Fatalf("resolve mn: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &flows{cancel: cancel, readErr: make(chan error, 1), writeErr: make(chan error, 1)}
	t.Cleanup(cancel)
	ln := n.MN.Listen("tcp", "[::]:7000")
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			f.readErr <- err
			return
		}
		defer c.Close()
		f.readErr <- nstest.ReadPattern(ctx, c, &f.received)
	}()
	f.tcp = n.CN.Dial("tcp", net.JoinHostPort(addr.String(), "7000"))
	t.Cleanup(func() { f.tcp.Close() })
	go func() {
		f.writeErr <- nstest.WritePattern(ctx, countingWriter{f.tcp, &f.written}, 1000, 2*time.Millisecond)
	}()

	// The echo server is bound to the session-view address, kept on lo across moves.
	echo := n.MN.ListenPacket("udp", net.JoinHostPort(addr.String(), "7001"))
	t.Cleanup(func() { echo.Close() })
	go nstest.EchoUDP(echo)
	f.udp = nstest.StartEchoProbe(n.CN.ListenPacket("udp", "[::]:0"), &net.UDPAddr{IP: addr.AsSlice(), Port: 7001}, udpEvery)
	t.Cleanup(func() { f.udp.Stop(0) })
	n.waitFor(5*time.Second, "both flows running", func() (bool, string) {
		return f.received.Load() > 10_000 && f.udp.Got() > 20,
			fmt.Sprintf("TCP %d bytes, UDP %d echoes", f.received.Load(), f.udp.Got())
	})
	return f
}

// flowResult is what the flows saw.
type flowResult struct {
	written, received int64
	tcpErr            error
	udpSent, udpLost  int64
	maxGap            time.Duration
}

// stop ends the flows: the TCP sender stops and half-closes, the receiver must then have read
// every byte written; UDP echoes have 1 s to come back.
func (f *flows) stop(t *testing.T) flowResult {
	t.Helper()
	f.cancel()
	var r flowResult
	r.tcpErr = nstest.EndPattern(f.tcp, f.writeErr, f.readErr, 10*time.Second)
	u := f.udp.Stop(time.Second)
	r.written, r.received = f.written.Load(), f.received.Load()
	r.udpSent, r.udpLost, r.maxGap = u.Sent, u.Sent-u.Got, u.MaxGap
	return r
}

// restartDaemon ends d with sig and returns when it has gone; the datapath must stay.
func (n *testNet) killDaemon(t *testing.T, d *daemon, sig syscall.Signal) {
	t.Helper()
	_ = d.proc.cmd.Process.Signal(sig)
	err, ok := d.proc.wait(10 * time.Second)
	if !ok {
		t.Fatalf("ilnpd %s still running 10 s after %v", d.name, sig)
	}
	if sig == syscall.SIGTERM && err != nil {
		t.Fatalf("ilnpd %s after SIGTERM: %v\n%s", d.name, err, tailFile(d.log, 20))
	}
	for _, pin := range []string{"sessions", "ilnp_layout"} {
		if _, err := os.Stat(filepath.Join(bpffs.Locate(filepath.Join(d.state, "bpf"), d.state), pin)); err != nil {
			t.Fatalf("ilnpd %s: %s no longer pinned after %v: %v", d.name, pin, sig, err)
		}
	}
}

// restart starts ilnpd again with d's configuration and returns the new daemon.
func (n *testNet) restart(t *testing.T, d *daemon) *daemon {
	t.Helper()
	_ = os.Remove(d.sock) // SIGKILL leaves it
	nd := n.runDaemon(d.name, d.ns, d.state, d.conf)
	n.waitFor(10*time.Second, d.name+" adopted the session", func() (bool, string) {
		rows, err := nd.sessions()
		return err == nil && len(rows) == 1, fmt.Sprint(rows, err)
	})
	return nd
}

// restartCase is one restart scenario: whose daemon, which signal, and how the MN moves
// relative to the daemon being down.
type restartCase struct {
	who string // "mn" or "cn"
	sig syscall.Signal
	// enterWhileDown: the MN's second link comes up while the daemon is down (the LU for it
	// follows the restart); leaveWhileDown: its first link also goes down then.
	enterWhileDown, leaveWhileDown bool
}

func runRestart(t *testing.T, c restartCase) {
	n := newTestNet(t, "soft")
	f := n.startFlows(t)
	time.Sleep(500 * time.Millisecond)
	d := n.mn
	if c.who == "cn" {
		d = n.cn
	}
	downMono := timeline.Now()
	n.killDaemon(t, d, c.sig)
	down := time.Now()
	if c.enterWhileDown {
		n.MN.Run("ip", "link", "set", "mn2", "up")
	}
	if c.leaveWhileDown {
		n.MN.Run("ip", "link", "set", "mn1", "down")
	}
	time.Sleep(time.Second) // RAs come and go; nobody acts on them
	nd := n.restart(t, d)
	gap := f.udp.Snapshot().MaxGap
	t.Logf("%s's ilnpd down for %v (%v, until its control socket answered and it adopted the session); "+
		"longest gap between UDP echoes (every %v) up to then: %v", c.who, time.Since(down).Round(time.Millisecond), c.sig,
		udpEvery, gap.Round(time.Millisecond))
	if c.who == "cn" {
		n.cn = nd
	} else {
		n.mn = nd
	}
	if c.enterWhileDown {
		if ack := n.waitMNAck(t, downMono, 10*time.Second); ack != nil {
			t.Logf("the move made while %s's ilnpd was down: LU acknowledged at attempt %d", c.who, ack.Attempt)
		}
	} else {
		enter := timeline.Now()
		n.MN.Run("ip", "link", "set", "mn2", "up")
		if ack := n.waitMNAck(t, enter, 5*time.Second); ack != nil && ack.Attempt != 1 && !n.mn.logSays(addressNotReceivable) {
			t.Errorf("LU on entering L3 after the restart acknowledged at attempt %d, want 1", ack.Attempt)
		}
	}
	n.waitFor(5*time.Second, "CN's session active on L3", func() (bool, string) {
		s, err := n.cn.sessions()
		return err == nil && len(s) == 1 && s[0].ActiveRemote == l3.String(), fmt.Sprint(s, err)
	})
	if !c.leaveWhileDown {
		time.Sleep(500 * time.Millisecond)
		leave := timeline.Now()
		n.MN.Run("ip", "link", "set", "mn1", "down")
		n.waitMNAck(t, leave, 5*time.Second)
	}
	time.Sleep(time.Second) // traffic on L3 alone
	r := f.stop(t)
	t.Logf("TCP %d bytes written, %d received; UDP %d sent, %d lost, longest gap between echoes %v",
		r.written, r.received, r.udpSent, r.udpLost, r.maxGap.Round(time.Millisecond))
	if r.tcpErr != nil || r.received != r.written || r.written < 100_000 {
		t.Errorf("TCP stream across the restart: %d of %d bytes received, %v", r.received, r.written, r.tcpErr)
	}
	if !c.leaveWhileDown && r.udpLost != 0 {
		t.Errorf("soft handoff across a restart lost %d of %d UDP echoes", r.udpLost, r.udpSent)
	}
	if c.leaveWhileDown && r.udpLost == r.udpSent {
		t.Errorf("no UDP echo came back at all")
	}
	mnEvs, _ := n.mn.events()
	if c.who == "mn" && !hasEvent(mnEvs, "adopted", "sessions=1") {
		t.Errorf("the MN's restarted ilnpd reported no adoption:\n%s", formatEvents(mnEvs, 0))
	}
	// `ilnpctl flush` ends the running daemon and removes everything.
	if out, err := nd.ctl("flush"); err != nil {
		t.Fatalf("ilnpctl flush: %v %s", err, out)
	}
	if err, ok := nd.proc.wait(10 * time.Second); !ok || err != nil {
		t.Fatalf("ilnpd after ilnpctl flush: exited %v, status %v", ok, err)
	}
	nd.checkFlushed(t)
}

// The MN's ilnpd is stopped (SIGTERM) mid-flow and started again, then the MN moves: the
// byte stream is intact, no UDP datagram is lost, and the LU after the restart is
// acknowledged at once.
func TestRestartMNSIGTERM(t *testing.T) { runRestart(t, restartCase{who: "mn", sig: syscall.SIGTERM}) }

// The MN's ilnpd is killed (SIGKILL) and its second link comes up while it is down: the
// restarted daemon sees the new locator and tells the CN.
func TestRestartMNSIGKILLEnterWhileDown(t *testing.T) {
	runRestart(t, restartCase{who: "mn", sig: syscall.SIGKILL, enterWhileDown: true})
}

// The MN moves completely (new link up, old link down) while its ilnpd is down: the restarted
// daemon drops the vanished locator, tells the CN about the new one, and the TCP session is
// saved (UDP sent into the dead link while nobody could act is lost).
func TestRestartMNLeaveWhileDown(t *testing.T) {
	runRestart(t, restartCase{who: "mn", sig: syscall.SIGTERM, enterWhileDown: true, leaveWhileDown: true})
}

// The CN's ilnpd is killed mid-flow and started again; the MN's next move is acknowledged by
// the restarted CN.
func TestRestartCNSIGKILL(t *testing.T) { runRestart(t, restartCase{who: "cn", sig: syscall.SIGKILL}) }

// The MN moves while the CN's ilnpd is down (SIGTERM): its LU is retransmitted until the
// restarted CN acknowledges it, with no UDP loss (soft handoff: the old locator still works).
func TestRestartCNSIGTERMEnterWhileDown(t *testing.T) {
	runRestart(t, restartCase{who: "cn", sig: syscall.SIGTERM, enterWhileDown: true})
}

// checkFlush runs `ilnpd -flush` for a stopped daemon: its identity addresses, programs, pins
// and state file are gone.
func (d *daemon) checkFlush(t *testing.T) {
	t.Helper()
	out, err := d.ns.Try(d.net.ilnpd(), "-flush", "-config", d.conf)
	if err != nil {
		t.Errorf("ilnpd -flush %s: %v: %s", d.name, err, out)
		return
	}
	d.checkFlushed(t)
}

// checkFlushed: the daemon's identity addresses, programs, pins and state file are gone.
func (d *daemon) checkFlushed(t *testing.T) {
	t.Helper()
	if out := d.ns.Run("ip", "-6", "addr", "show", "dev", "lo", "scope", "global"); strings.TrimSpace(out) != "" {
		t.Errorf("ilnpd %s: addresses on lo after -flush:\n%s", d.name, out)
	}
	ents, _ := os.ReadDir(bpffs.Locate(filepath.Join(d.state, "bpf"), d.state))
	if len(ents) != 0 {
		t.Errorf("ilnpd %s: pins left after -flush: %v", d.name, ents)
	}
	if b, err := os.ReadFile(filepath.Join(d.state, bpffs.HolderFile)); !os.IsNotExist(err) {
		t.Errorf("ilnpd %s: bpffs holder %q left after -flush: %v", d.name, b, err)
	}
	if _, err := os.Stat(filepath.Join(d.state, "ilnpd.state")); !os.IsNotExist(err) {
		t.Errorf("ilnpd %s: state file left after -flush: %v", d.name, err)
	}
	_ = d.ns.Do(func() error {
		ifs, _ := net.Interfaces()
		for _, ifc := range ifs {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				if r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: at}); err == nil && len(r.Programs) > 0 {
					t.Errorf("ilnpd %s: %d programs still attached to %s after -flush", d.name, len(r.Programs), ifc.Name)
				}
			}
		}
		return nil
	})
}

// A pinned datapath of another layout is refused at start with the message README.md
// documents, and `ilnpd -flush` is the way out.
func TestLayoutMismatchRefused(t *testing.T) {
	nstest.RequireRoot(t)
	n := &testNet{t: t, dir: t.TempDir(), bin: binaries(t)}
	ns := nstest.New(t, "lay")
	ns.Run("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	ns.Run("ip", "link", "set", "v0", "up")
	state := n.stateDir("x")
	// A bpffs the user mounted beforehand, as README's "Restart and upgrade" allows: the
	// daemon pins there and starts no holder.
	bpf := filepath.Join(state, "bpf")
	if err := os.MkdirAll(bpf, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpffs", bpf, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs at %s: %v", bpf, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bpf, unix.MNT_DETACH) })
	conf := n.writeConfig("x", fmt.Sprintf("node x\ninterfaces v0\nnid %s\nstate-dir %s\n", mnNIDText, state))
	rec, err := ebpf.NewMap(&ebpf.MapSpec{Name: "ilnp_layout", Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	var v [64]byte
	copy(v[:], "v0-0123456789abcdef")
	if err := rec.Put(uint32(0), v); err != nil {
		t.Fatal(err)
	}
	if err := rec.Pin(filepath.Join(state, "bpf", "ilnp_layout")); err != nil {
		t.Fatal(err)
	}
	out, err := ns.Try(n.ilnpd(), "-config", conf)
	want := "have layout v0-0123456789abcdef, this ilnpd needs v1-"
	way := "their sessions cannot be adopted: run `ilnpd -flush -config FILE` (ends them) and start ilnpd again"
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, way) {
		t.Fatalf("ilnpd over another layout: %v\n%s\nwant a refusal with %q and %q", err, out, want, way)
	}
	if out, err := ns.Try(n.ilnpd(), "-flush", "-config", conf); err != nil {
		t.Fatalf("ilnpd -flush: %v %s", err, out)
	}
	d := n.runDaemon("x", ns, state, conf)
	if err := d.stop(10 * time.Second); err != nil {
		t.Fatalf("ilnpd after the flush: %v\n%s", err, tailFile(d.log, 20))
	}
	d.checkFlush(t)
}
