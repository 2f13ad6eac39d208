package scalesess

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
	"ilnp/lab"
	"ilnp/lab/attack"
	"ilnp/lab/netns"
)

// openSessions has correspondents ids of g (at loc) open sessions to dst's echo service at
// rate sessions a second, each with a datagram and, 0.25 s later, a second one that proves it
// (a session whose correspondent sent only its first packet is closed after
// session-unproven-timeout).
func (s *scaleRun) openSessions(ctx context.Context, g *group, ids []int, loc wire.L64, dst wire.ILV, rate int) error {
	lag := max(1, rate/4)
	total := 2 * (len(ids) + lag)
	_, err := s.peers.pace(ctx, total, 2*rate, func(j int) ([]byte, error) {
		k := j / 2
		if j%2 == 0 {
			if k < len(ids) {
				return opener(g, ids[k], loc, dst.Addr(), echoPort, "open")
			}
			return nil, nil
		}
		if k -= lag; k >= 0 && k < len(ids) {
			return opener(g, ids[k], loc, dst.Addr(), echoPort, "prove")
		}
		return nil, nil
	})
	return err
}

// openUntil opens sessions for all of g until ns's ILCC has them, resending to the missing
// ones up to three times (a datagram the CN's echo socket dropped under the burst).
func (s *scaleRun) openUntil(ctx context.Context, ns *netns.NS, sock string, g *group, loc wire.L64, dst wire.ILV, rate int) (int, error) {
	ids := make([]int, len(g.nonces))
	for i := range ids {
		ids[i] = i
	}
	have := map[int]bool{}
	stall := stallLimit(len(g.nonces))
	for round := 0; round < 4 && len(ids) > 0; round++ {
		if err := s.openSessions(ctx, g, ids, loc, dst, rate); err != nil {
			return len(have), err
		}
		// The daemon records them from its event ring: wait until the count stops growing.
		last, still := -1, time.Now()
		for {
			if err := sleep(ctx, time.Second); err != nil {
				return len(have), err
			}
			// Counted by the daemon (the list of 100,000 is slow): this group's sessions are
			// all the ILCC holds but the bystander's and the other group's.
			st, err := s.stats(ns, sock)
			if err != nil {
				// A daemon busy adopting a million sessions may miss a request's timeout:
				// what counts is the count standing still for stall.
				if time.Since(still) > stall {
					return len(have), err
				}
				fmt.Fprintf(s.cfg.Log, "scale: %s: %v (retrying)\n", ns.Name, err)
				continue
			}
			count := int(st["ilcc_sessions"])
			if count >= len(g.nonces) {
				if have, err = s.peerSessions(ns, sock, g); err != nil {
					return len(have), err
				}
				if len(have) == len(g.nonces) {
					return len(have), nil
				}
			}
			if count != last {
				last, still = count, time.Now()
			} else if time.Since(still) > stall {
				break
			}
		}
		var err error
		if have, err = s.peerSessions(ns, sock, g); err != nil {
			return len(have), err
		}
		ids = ids[:0]
		for i := range g.nonces {
			if !have[i] {
				ids = append(ids, i)
			}
		}
		fmt.Fprintf(s.cfg.Log, "scale: %s has %d of %d sessions; sending to the %d others again\n", ns.Name, len(have), len(g.nonces), len(ids))
	}
	return len(have), nil
}

// stallLimit is how long openUntil waits for the count of n sessions to grow before it sends to
// the missing ones again: the daemon adopts sessions whose events were lost at the next touch
// (every 5 s) and goes on until none is missing, a netlink route each; at a million sessions
// a turn of its loop (a state file step, a path poll) can hold the count longer.
func stallLimit(n int) time.Duration {
	return max(6*time.Second, time.Duration(n/50_000)*time.Second)
}

// scaled is base for 100,000 sessions or fewer, and grows with n beyond (the daemon's work at
// a start, a stop or an adoption is per session).
func scaled(base time.Duration, n int) time.Duration {
	return max(base, time.Duration(float64(base)*float64(n)/100_000))
}

// openCN opens the CN's sessions.
func (s *scaleRun) openCN(ctx context.Context, r *Result) error {
	begin := time.Now()
	loc, err := l64(prefixA)
	if err != nil {
		return err
	}
	n, err := s.openUntil(ctx, s.t.CN, s.cnSock, s.cn, loc, s.cnAddr, s.cfg.OpenRate)
	r.Notes.Opened, r.Notes.OpenSeconds = n, time.Since(begin).Seconds()
	if st, serr := s.stats(s.t.CN, s.cnSock); serr == nil {
		r.Notes.EventsLost, r.Notes.Recovered = st["dp_events_lost"], st["sessions_reconciled"]
	}
	fmt.Fprintf(s.cfg.Log, "scale: the CN has %d sessions after %.1f s\n", n, r.Notes.OpenSeconds)
	if err != nil {
		return err
	}
	if n != s.cfg.Sessions {
		return fmt.Errorf("the CN has %d of %d sessions", n, s.cfg.Sessions)
	}
	return nil
}

func l64(p interface{ String() string }) (wire.L64, error) {
	s := p.String()
	return wire.ParseL64(strings.TrimSuffix(s, "/64"))
}

// memory reads the CN's map bytes and its daemon's RSS with the sessions open.
func (s *scaleRun) memory(r *Result) error {
	pid := s.cnProc.Cmd.Process.Pid
	var err error
	if r.Notes.RSSAfter, err = rss(pid); err != nil {
		return err
	}
	if r.Notes.KernelMapBytes, err = mapBytes(pid); err != nil {
		return err
	}
	s.startProfile(context.Background(), "cn", "heap", "cn-heap.pprof").wait(s.cfg.Log)
	n := float64(r.Sessions)
	r.KernelBytesPerSession = float64(r.Notes.KernelMapBytes) / n
	r.DaemonBytesPerSession = float64(r.Notes.RSSAfter-r.Notes.RSSBefore) / n
	fmt.Fprintf(s.cfg.Log, "scale: maps %d bytes, ilnpd RSS %d -> %d bytes\n", r.Notes.KernelMapBytes, r.Notes.RSSBefore, r.Notes.RSSAfter)
	return nil
}

// rss is a process's VmRSS in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// mapBytes sums the memlock of every BPF map the process holds a descriptor of.
func mapBytes(pid int) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	maps := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !strings.Contains(string(b), "map_type:") {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "memlock:" {
				v, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return 0, err
				}
				total += v
				maps++
			}
		}
	}
	if maps == 0 {
		return 0, fmt.Errorf("ilnpd (pid %d) holds no BPF map", pid)
	}
	return total, nil
}

// progStats is the run time and count of the programs attached to ifname's TCX hooks in ns.
func progStats(ns *netns.NS, ifname string) (egress, ingress ebpf.ProgramStats, err error) {
	err = ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		for _, h := range []struct {
			at  ebpf.AttachType
			out *ebpf.ProgramStats
		}{{ebpf.AttachTCXEgress, &egress}, {ebpf.AttachTCXIngress, &ingress}} {
			q, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: h.at})
			if err != nil {
				return fmt.Errorf("programs on %s: %w", ifname, err)
			}
			for _, ap := range q.Programs {
				p, err := ebpf.NewProgramFromID(ap.ID)
				if err != nil {
					return err
				}
				st, err := p.Stats()
				p.Close()
				if err != nil {
					return err
				}
				// Programs in a chain all run per packet: their times add, the count is one.
				h.out.Runtime += st.Runtime
				h.out.RunCount = max(h.out.RunCount, st.RunCount)
			}
		}
		return nil
	})
	return egress, ingress, err
}

// perPacket has every correspondent (up to 20,000) send one datagram to the CN's echo service
// and reads the kernel time of the CN's programs per run over it.
func (s *scaleRun) perPacket(ctx context.Context, r *Result) error {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("BPF run-time statistics: %w", err)
	}
	defer stats.Close()
	e0, i0, err := progStats(s.t.CN, lab.IfCN)
	if err != nil {
		return err
	}
	loc, err := l64(prefixA)
	if err != nil {
		return err
	}
	count := min(len(s.cn.nonces), 20000)
	step := max(1, len(s.cn.nonces)/count) // spread over the whole table
	if _, err := s.peers.pace(ctx, count, 10000, func(j int) ([]byte, error) {
		return opener(s.cn, (j*step)%len(s.cn.nonces), loc, s.cnAddr.Addr(), echoPort, "data")
	}); err != nil {
		return err
	}
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	e1, i1, err := progStats(s.t.CN, lab.IfCN)
	if err != nil {
		return err
	}
	r.Notes.EgressPkts, r.Notes.IngressPkts = e1.RunCount-e0.RunCount, i1.RunCount-i0.RunCount
	if r.Notes.EgressPkts == 0 || r.Notes.IngressPkts == 0 {
		return fmt.Errorf("the CN's programs did not run (egress %d, ingress %d runs)", r.Notes.EgressPkts, r.Notes.IngressPkts)
	}
	r.EgressNsPerPkt = float64((e1.Runtime - e0.Runtime).Nanoseconds()) / float64(r.Notes.EgressPkts)
	r.IngressNsPerPkt = float64((i1.Runtime - i0.Runtime).Nanoseconds()) / float64(r.Notes.IngressPkts)
	fmt.Fprintf(s.cfg.Log, "scale: datapath %.0f ns egress (%d runs), %.0f ns ingress (%d runs)\n",
		r.EgressNsPerPkt, r.Notes.EgressPkts, r.IngressNsPerPkt, r.Notes.IngressPkts)
	return nil
}

// massMove: LUs from distinct sessions at LURate for LUDuration, each from the session's new
// locator, while the MN sends a flow to the CN's echo service beside them.
func (s *scaleRun) massMove(ctx context.Context, r *Result) error {
	locB, err := l64(prefixB)
	if err != nil {
		return err
	}
	count := min(len(s.cn.nonces), int(float64(s.cfg.LURate)*s.cfg.LUDuration.Seconds()))
	st0, err := s.stats(s.t.CN, s.cnSock)
	if err != nil {
		return err
	}
	by, err := startBystander(s.t.MN, s.cnAddr, echoPort, time.Millisecond)
	if err != nil {
		return err
	}
	defer by.stop()
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	secs := int(s.cfg.LUDuration.Seconds() + 1.5)
	prof := s.startProfile(ctx, "cn", fmt.Sprintf("profile?seconds=%d", secs), "cn-massmove.cpu.pprof")
	defer prof.wait(s.cfg.Log)
	trace := s.startProfile(ctx, "cn", fmt.Sprintf("trace?seconds=%d", secs), "cn-massmove.trace")
	defer trace.wait(s.cfg.Log)
	begin := time.Now()
	sent, err := s.peers.pace(ctx, count, s.cfg.LURate, func(i int) ([]byte, error) {
		src := wire.ILV{Locator: locB, NID: s.cn.nid(i)}
		pkt, err := luPacket(src, s.cnAddr, []wire.L64{locB}, s.cn.nonces[i])
		s.cn.luNs[i].Store(s.peers.now())
		return pkt, err
	})
	r.LUsSent = sent
	r.Notes.LUSeconds = time.Since(begin).Seconds()
	if err != nil {
		return err
	}
	// Every LU answered, or 10 s (more with more sessions: a busier loop).
	for deadline := time.Now().Add(scaled(10*time.Second, s.cfg.Sessions)); time.Now().Before(deadline); {
		if acked(s.cn, sent) == sent {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	sentBy, lost := by.stop()
	r.BystanderLost, r.Notes.BystanderSent = lost, sentBy
	var lat []float64
	for i := 0; i < sent; i++ {
		if a := s.cn.ackNs[i].Load(); a != 0 {
			lat = append(lat, float64(a-s.cn.luNs[i].Load())/1e6)
		}
	}
	r.LUsAcked = len(lat)
	slices.Sort(lat)
	r.LUAckP50Ms, r.LUAckP99Ms = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		r.Notes.LUAckMaxMs = lat[len(lat)-1]
	}
	st1, err := s.stats(s.t.CN, s.cnSock)
	if err != nil {
		return err
	}
	r.Notes.LUAckSentByCN = st1["lu_ack_sent"] - st0["lu_ack_sent"]
	r.Notes.LUReceivedByCN = st1["lu_received"] - st0["lu_received"]
	fmt.Fprintf(s.cfg.Log, "scale: mass move %d LUs in %.1f s, %d acked (CN: %d sent), p50 %.2f p99 %.2f max %.2f ms; bystander %d sent, %d lost\n",
		sent, r.Notes.LUSeconds, r.LUsAcked, r.Notes.LUAckSentByCN, r.LUAckP50Ms, r.LUAckP99Ms, r.Notes.LUAckMaxMs, sentBy, lost)
	return nil
}

func luPacket(src, dst wire.ILV, locs []wire.L64, n wire.Nonce) ([]byte, error) {
	return attack.LocatorUpdate(src, dst, wire.OpAdvertisement, locs, n)
}

func acked(g *group, n int) int {
	c := 0
	for i := 0; i < n; i++ {
		if g.ackNs[i].Load() != 0 {
			c++
		}
	}
	return c
}

// percentile of sorted values (nearest rank).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// fanout: the MN's correspondents open sessions to it; its L3 interface comes up; the time
// from L3 becoming its active locator (locator_added or active_locator "-> active") to the
// last LU-ACK, from its timeline.
func (s *scaleRun) fanout(ctx context.Context, r *Result) error {
	locC, err := l64(prefixC)
	if err != nil {
		return err
	}
	n, err := s.openUntil(ctx, s.t.MN, s.mnSock, s.mn, locC, s.mnAddr, 2000)
	r.Notes.FanoutOpened = n
	if err != nil {
		return err
	}
	if n != len(s.mn.nonces) {
		return fmt.Errorf("the MN has %d of %d sessions", n, len(s.mn.nonces))
	}
	st0, err := s.stats(s.t.MN, s.mnSock)
	if err != nil {
		return err
	}
	prof := s.startProfile(ctx, "mn", "profile?seconds=3", "mn-fanout.cpu.pprof")
	defer prof.wait(s.cfg.Log)
	t0 := monoNow()
	if _, err := s.t.MN.Run("ip", "link", "set", lab.IfMNR3, "up"); err != nil {
		return err
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if acked(s.mn, len(s.mn.nonces)) == len(s.mn.nonces) {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := sleep(ctx, time.Second); err != nil { // the last ACKs reach the timeline
		return err
	}
	st1, err := s.stats(s.t.MN, s.mnSock)
	if err != nil {
		return err
	}
	r.Notes.FanoutSendErrors = int(st1["lu_send_errors"] - st0["lu_send_errors"])
	evs, err := readEvents(s.mnEvents)
	if err != nil {
		return err
	}
	locL3, err := l64(lab.L3)
	if err != nil {
		return err
	}
	var move, last int64
	ackedPeers := map[string]bool{}
	for _, e := range evs {
		if e.MonoNS < t0 {
			continue
		}
		switch {
		case (e.Kind == timeline.ActiveLocator || e.Kind == timeline.LocatorAdded) && move == 0 &&
			e.Locator == locL3.String() && strings.HasSuffix(e.Detail, "-> active"):
			move = e.MonoNS
		case e.Kind == timeline.LUSent && s.isMNPeer(e.Peer):
			r.Notes.FanoutLUs++
			if e.Attempt > 1 {
				r.Notes.FanoutRetransmits++
			}
		case e.Kind == timeline.LUAckReceived && s.isMNPeer(e.Peer) && strings.Contains(e.Detail, "outcome=acked"):
			ackedPeers[e.Peer] = true
			last = max(last, e.MonoNS)
		}
	}
	r.Notes.FanoutAcked = len(ackedPeers)
	if move == 0 || last == 0 {
		var seen []string
		for _, e := range evs {
			if e.MonoNS >= t0 && e.Kind != timeline.LUSent && e.Kind != timeline.LUAckReceived && len(seen) < 20 {
				seen = append(seen, fmt.Sprintf("%s %s %s", e.Kind, e.Locator, e.Detail))
			}
		}
		return fmt.Errorf("the MN's timeline has no move to %s (%d) or no acknowledged LU (%d); after the link came up: %s",
			locL3, move, last, strings.Join(seen, "; "))
	}
	r.FanoutMs = float64(last-move) / 1e6
	fmt.Fprintf(s.cfg.Log, "scale: fan-out to %d correspondents: %d LUs, %d acknowledged, %d retransmissions, %.1f ms\n",
		len(s.mn.nonces), r.Notes.FanoutLUs, r.Notes.FanoutAcked, r.Notes.FanoutRetransmits, r.FanoutMs)
	return nil
}

func (s *scaleRun) isMNPeer(nid string) bool {
	n, err := wire.ParseNID(nid)
	return err == nil && s.mn.index(n) >= 0
}

// tailEvents reads the events written to path past *off, whole lines only, and moves *off
// past them.
func tailEvents(path string, off *int64) ([]timeline.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(*off, io.SeekStart); err != nil {
		return nil, err
	}
	var out []timeline.Event
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) { // with a line still being written, or none
			return out, nil
		}
		if err != nil {
			return out, err
		}
		*off += int64(len(line))
		var e timeline.Event
		if json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
}

func readEvents(path string) ([]timeline.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []timeline.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e timeline.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// restart stops the CN's ilnpd (SIGTERM) with its sessions and starts it again.
func (s *scaleRun) restart(ctx context.Context, r *Result) error {
	// Counted by the daemon: listing 100,000 sessions outlasts ilnpctl's request timeout.
	st, err := s.stats(s.t.CN, s.cnSock)
	if err != nil {
		return err
	}
	r.Notes.RestartBefore = int(st["ilcc_sessions"])
	s.cnProc.Stop(scaled(30*time.Second, s.cfg.Sessions))
	// The timeline holds a line per session opened: at a million, hundreds of MB that the
	// wait below must not parse again and again beside the daemon it times.
	var off int64
	if fi, err := os.Stat(s.cnEvents); err == nil {
		off = fi.Size()
	}
	t0 := monoNow()
	p, err := s.t.Start(s.t.CN, "ilnpd-cn-restarted", filepath.Join(s.cfg.BinDir, "ilnpd"), "-config", s.cnConf)
	if err != nil {
		return err
	}
	s.cnProc = p
	var adopted int64
	limit := scaled(120*time.Second, s.cfg.Sessions)
	for deadline := time.Now().Add(limit); adopted == 0; {
		evs, err := tailEvents(s.cnEvents, &off)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.MonoNS > t0 && e.Kind == "adopted" {
				adopted = e.MonoNS
				for _, f := range strings.Fields(e.Detail) {
					if v, ok := strings.CutPrefix(f, "sessions="); ok {
						r.Notes.RestartAdopted, _ = strconv.Atoi(v)
					}
				}
			}
		}
		if adopted != 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the restarted ilnpd adopted nothing within %s: %s", limit, lastLines(p.Log(), 5))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	r.AdoptMs = float64(adopted-t0) / 1e6
	if err := s.waitReady(ctx, s.t.CN, s.cnSock, scaled(60*time.Second, s.cfg.Sessions)); err != nil {
		return err
	}
	st, err = s.stats(s.t.CN, s.cnSock)
	if err != nil {
		return err
	}
	r.Notes.RestartAfter = int(st["ilcc_sessions"])
	fmt.Fprintf(s.cfg.Log, "scale: restart with %d sessions: adopted %d in %.1f ms, %d in the ILCC after\n",
		r.Notes.RestartBefore, r.Notes.RestartAdopted, r.AdoptMs, r.Notes.RestartAfter)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// echoServer answers every UDP datagram on a port with itself.
type echoServer struct {
	c    *net.UDPConn
	done chan struct{}
}

func newEchoServer(ns *netns.NS, port int) (*echoServer, error) {
	e := &echoServer{done: make(chan struct{})}
	if err := ns.Do(func() (err error) {
		e.c, err = net.ListenUDP("udp6", &net.UDPAddr{Port: port})
		return err
	}); err != nil {
		return nil, fmt.Errorf("echo service in %s: %w", ns.Name, err)
	}
	setBuffers(e.c)
	go func() {
		defer close(e.done)
		buf := make([]byte, 2048)
		for {
			n, from, err := e.c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = e.c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return e, nil
}

func (e *echoServer) close() {
	e.c.Close()
	<-e.done
}

// setBuffers gives a socket 16 MB each way (a burst of thousands of datagrams).
func setBuffers(c *net.UDPConn) {
	if raw, err := c.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20)
		})
	}
}

// bystander is a UDP flow from the MN to the CN's echo service: a datagram per interval, each
// numbered; what never comes back is lost.
type bystander struct {
	c       *net.UDPConn
	sent    atomic.Int64
	got     []atomic.Bool
	quit    chan struct{}
	done    chan struct{}
	rdone   chan struct{}
	stopped bool
}

const bystanderMax = 1 << 20

func startBystander(ns *netns.NS, dst wire.ILV, port int, every time.Duration) (*bystander, error) {
	b := &bystander{got: make([]atomic.Bool, bystanderMax), quit: make(chan struct{}), done: make(chan struct{}), rdone: make(chan struct{})}
	if err := ns.Do(func() (err error) {
		b.c, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: dst.Addr().AsSlice(), Port: port})
		return err
	}); err != nil {
		return nil, fmt.Errorf("bystander flow from %s: %w", ns.Name, err)
	}
	setBuffers(b.c)
	go func() {
		defer close(b.rdone)
		buf := make([]byte, 2048)
		for {
			n, err := b.c.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				if seq := binary.BigEndian.Uint64(buf); seq < bystanderMax {
					b.got[seq].Store(true)
				}
			}
		}
	}()
	go func() {
		defer close(b.done)
		t := time.NewTicker(every)
		defer t.Stop()
		msg := make([]byte, 64)
		for seq := uint64(0); seq < bystanderMax; seq = uint64(b.sent.Load()) {
			select {
			case <-b.quit:
				return
			case <-t.C:
			}
			binary.BigEndian.PutUint64(msg, seq)
			if _, err := b.c.Write(msg); err == nil {
				b.sent.Add(1)
			}
		}
	}()
	return b, nil
}

// stop ends the flow, waits half a second for the last echoes and returns sent and lost.
func (b *bystander) stop() (sent, lost int) {
	if !b.stopped {
		b.stopped = true
		close(b.quit)
		<-b.done
		time.Sleep(500 * time.Millisecond)
		b.c.Close()
		<-b.rdone
	}
	n := int(b.sent.Load())
	for i := 0; i < n; i++ {
		if !b.got[i].Load() {
			lost++
		}
	}
	return n, lost
}
