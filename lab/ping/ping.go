// Package ping measures round-trip time with ICMPv6 echo (or ICMP echo over IPv4, Listen4:
// the cross-family testbed's IPv4-only access networks) from inside a namespace (the lab needs
// no ping binary).
package ping

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"unsafe"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Result holds the replies of one measurement.
type Result struct {
	Sent int
	RTTs []time.Duration
}

// MeanMS is the mean RTT in milliseconds (NaN-free: 0 when nothing came back).
func (r Result) MeanMS() float64 {
	if len(r.RTTs) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range r.RTTs {
		sum += d
	}
	return float64(sum) / float64(len(r.RTTs)) / 1e6
}

// Conn is an ICMPv6 socket. Open it with the thread inside the namespace (netns.NS.Do).
type Conn struct {
	c  *net.IPConn
	id int
	v4 bool // ICMP over IPv4 (Listen4)
}

// Listen opens the socket. Replies are stamped by the kernel on arrival, so a busy machine
// delaying this process does not inflate the RTT.
func Listen() (*Conn, error) { return listen(false) }

// Listen4 opens an ICMP (IPv4) socket, stamped the same way.
func Listen4() (*Conn, error) { return listen(true) }

func listen(v4 bool) (*Conn, error) {
	network, laddr := "ip6:ipv6-icmp", "::"
	if v4 {
		network, laddr = "ip4:icmp", "0.0.0.0"
	}
	pc, err := net.ListenPacket(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("ping: %s socket: %w", network, err)
	}
	c := pc.(*net.IPConn)
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		c.Close()
		return nil, fmt.Errorf("ping: SO_TIMESTAMPNS: %v %v", err, serr)
	}
	return &Conn{c: c, id: int(time.Now().UnixNano() & 0xffff), v4: v4}, nil
}

// stamp returns the kernel receive time from control messages, or fallback.
func stamp(oob []byte, fallback time.Time) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fallback
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			t := time.Unix(ts.Unix())
			if age := fallback.Sub(t); age >= 0 && age < time.Minute {
				return fallback.Add(-age) // keeps the monotonic reading
			}
		}
	}
	return fallback
}

// Close releases the socket.
func (c *Conn) Close() error { return c.c.Close() }

// Ping sends count echoes interval apart and waits up to timeout for each reply.
func (c *Conn) Ping(dst string, count int, interval, timeout time.Duration) (Result, error) {
	ip := net.ParseIP(dst)
	if ip == nil {
		return Result{}, fmt.Errorf("ping: bad address %q", dst)
	}
	res := Result{}
	sent := map[int]time.Time{}
	buf := make([]byte, 1500)
	oob := make([]byte, 128)
	for seq := 1; seq <= count; seq++ {
		payload := make([]byte, 56)
		binary.BigEndian.PutUint64(payload, uint64(seq))
		var typ icmp.Type = ipv6.ICMPTypeEchoRequest
		if c.v4 {
			typ = ipv4.ICMPTypeEcho
		}
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: c.id, Seq: seq, Data: payload}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return res, err
		}
		sent[seq] = time.Now()
		if _, err := c.c.WriteTo(b, &net.IPAddr{IP: ip}); err != nil {
			return res, fmt.Errorf("ping %s: %w", dst, err)
		}
		res.Sent++
		deadline := time.Now().Add(timeout)
		for {
			_ = c.c.SetReadDeadline(deadline)
			n, oobn, _, _, err := c.c.ReadMsgIP(buf, oob)
			if err != nil {
				break // timeout: this echo is lost
			}
			at := stamp(oob[:oobn], time.Now())
			var m *icmp.Message
			if c.v4 {
				// A raw IPv4 socket reads the IP header too.
				b := buf[:n]
				if len(b) < 20 || b[0]>>4 != 4 || len(b) < int(b[0]&0x0f)*4 {
					continue
				}
				if m, err = icmp.ParseMessage(1, b[int(b[0]&0x0f)*4:]); err != nil || m.Type != ipv4.ICMPTypeEchoReply {
					continue
				}
			} else if m, err = icmp.ParseMessage(58, buf[:n]); err != nil || m.Type != ipv6.ICMPTypeEchoReply {
				continue
			}
			echo, ok := m.Body.(*icmp.Echo)
			if !ok || echo.ID != c.id {
				continue
			}
			if t0, ok := sent[echo.Seq]; ok {
				res.RTTs = append(res.RTTs, at.Sub(t0))
				delete(sent, echo.Seq)
				if echo.Seq == seq {
					break
				}
			}
		}
		if seq < count {
			time.Sleep(interval)
		}
	}
	return res, nil
}
