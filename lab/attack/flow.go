package attack

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/lab/netns"
)

// flow is a paced TCP stream from the CN to the MN (about 1.6 MB/s): the victim connection of
// the forged resets and the "flow unaffected" of every attack.
type flow struct {
	client, server net.Conn
	ln             net.Listener
	received       atomic.Int64
	mu             sync.Mutex
	err            error
	cancel         context.CancelFunc
	wg             sync.WaitGroup
	ClientPort     uint16
}

func startFlow(cn, mn *netns.NS, mnAddr netip.Addr, port int) (*flow, error) {
	f := &flow{}
	if err := mn.Do(func() (err error) {
		f.ln, err = net.Listen("tcp6", fmt.Sprintf("[::]:%d", port))
		return err
	}); err != nil {
		return nil, fmt.Errorf("flow: listen on the MN: %w", err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := f.ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	if err := cn.Do(func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		f.client, err = d.Dial("tcp6", netip.AddrPortFrom(mnAddr, uint16(port)).String())
		return err
	}); err != nil {
		f.ln.Close()
		return nil, fmt.Errorf("flow: connect CN -> MN %s: %w", mnAddr, err)
	}
	select {
	case c, ok := <-accepted:
		if !ok {
			f.client.Close()
			f.ln.Close()
			return nil, fmt.Errorf("flow: the MN accepted nothing")
		}
		f.server = c
	case <-time.After(5 * time.Second):
		f.client.Close()
		f.ln.Close()
		return nil, fmt.Errorf("flow: the MN accepted nothing within 5 s")
	}
	f.ClientPort = uint16(f.client.LocalAddr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 8192)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_ = f.client.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := f.client.Write(buf); err != nil {
				f.fail(fmt.Errorf("CN write: %w", err))
				return
			}
		}
	}()
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 65536)
		for {
			k, err := f.server.Read(buf)
			f.received.Add(int64(k))
			if err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("MN read: %w", err))
				}
				return
			}
		}
	}()
	return f, nil
}

func (f *flow) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// Err is the first error either end saw.
func (f *flow) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *flow) stop() {
	f.cancel()
	f.client.Close()
	f.server.Close()
	f.ln.Close()
	f.wg.Wait()
}

// sink is a UDP socket on the CN that counts the forged datagrams delivered to it: a data packet
// the datapath let through arrives here.
type sink struct {
	conn net.PacketConn
	got  atomic.Int64
	done chan struct{}
}

func newSink(ns *netns.NS, port int) (*sink, error) {
	s := &sink{done: make(chan struct{})}
	if err := ns.Do(func() (err error) {
		s.conn, err = net.ListenPacket("udp6", fmt.Sprintf("[::]:%d", port))
		return err
	}); err != nil {
		return nil, fmt.Errorf("UDP sink on %s: %w", ns.Name, err)
	}
	go func() {
		defer close(s.done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := s.conn.ReadFrom(buf); err != nil {
				return
			}
			s.got.Add(1)
		}
	}()
	return s, nil
}

func (s *sink) close() {
	s.conn.Close()
	<-s.done
}

// rawSender sends whole IPv6 packets from inside an attacker namespace.
type rawSender struct{ fd int }

func newRawSender(ns *netns.NS) (*rawSender, error) {
	var fd int
	if err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW)
		return err
	}); err != nil {
		return nil, fmt.Errorf("raw socket in %s: %w", ns.Name, err)
	}
	return &rawSender{fd: fd}, nil
}

func (r *rawSender) close() { unix.Close(r.fd) }

// send sends count packets made by mk at rate per second and returns how many the socket took.
func (r *rawSender) send(ctx context.Context, count, rate int, mk func(i int) ([]byte, error)) (int, error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	sent := 0
	for i := 0; i < count; i++ {
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-tick.C:
		}
		pkt, err := mk(i)
		if err != nil {
			return sent, err
		}
		var dst [16]byte
		copy(dst[:], pkt[24:40])
		if err := unix.Sendto(r.fd, pkt, 0, &unix.SockaddrInet6{Addr: dst}); err != nil {
			return sent, fmt.Errorf("forged packet %d: %w", i, err)
		}
		sent++
	}
	return sent, nil
}

// sniffAck returns the acknowledgement number of a segment from src:sport to dst:dport seen
// on ifname in ns: the next sequence number src's socket expects from dst.
func sniffAck(ns *netns.NS, ifname string, src, dst netip.Addr, sport, dport uint16) (uint32, error) {
	var fd int
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_IPV6))
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifi.Index})
	}); err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		return 0, fmt.Errorf("sniffer on %s: %w", ifname, err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	buf := make([]byte, 256)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		k, _, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		if err != nil {
			continue
		}
		seg, err := ParseSegment(buf[:min(k, len(buf))])
		if err != nil {
			continue
		}
		if seg.Src == src && seg.Dst == dst && seg.SPort == sport && seg.DPort == dport && seg.Flags&flagACK != 0 {
			return seg.Ack, nil
		}
	}
	return 0, fmt.Errorf("no segment %s.%d -> %s.%d on %s within 5 s", src, sport, dst, dport, ifname)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// kernelCounter reads one counter of /proc/net/snmp (e.g. "Tcp", "EstabResets") or, with
// iface set, of /proc/net/dev_snmp6/IFACE (e.g. "Ip6InHdrErrors") inside ns.
func kernelCounter(ns *netns.NS, iface, group, name string) (uint64, error) {
	if iface != "" {
		out, err := ns.Run("cat", "/proc/net/dev_snmp6/"+iface)
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == name {
				return strconv.ParseUint(f[1], 10, 64)
			}
		}
		return 0, fmt.Errorf("%s: no counter %s", iface, name)
	}
	out, err := ns.Run("cat", "/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	var header []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != group+":" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i := 1; i < len(f) && i < len(header); i++ {
			if header[i] == name {
				return strconv.ParseUint(f[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/snmp: no counter %s %s", group, name)
}
