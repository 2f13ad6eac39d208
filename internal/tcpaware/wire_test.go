package tcpaware

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// delayLine is the wan-wan path's wire in small, for these tests only (the lab's emulator is
// the lab's: the product's packages never import lab/): two veth ends bridged over AF_PACKET
// with a one-way delay (set at open, changed by setDelay), frames kept in order. It can also
// cut every frame to a set of IPv6 destinations at the moment it would be delivered, which is
// what a dead locator does to the window in flight: cut and heal are one atomic store each, so
// the cut lasts as long as the test says even when the machine is too busy to start an nft
// process promptly.
type delayLine struct {
	delay   atomic.Int64 // one way, ns: frames keep the delay they arrived under
	ports   [2]int       // AF_PACKET sockets on the two ends
	names   [2]string
	cutDst  map[[16]byte]bool
	cutting atomic.Bool
	// What the wire did: frames delivered and cut, and the worst lateness of a delivery
	// against arrival + delay (the CPU the forwarder did not get).
	delivered, cutDrops atomic.Uint64
	worstLate           atomic.Int64
}

// openDelayLine binds both ends; call with the thread in the wire namespace.
func openDelayLine(a, b string, delay time.Duration, cut ...string) (*delayLine, error) {
	d := &delayLine{names: [2]string{a, b}, cutDst: map[[16]byte]bool{}}
	d.delay.Store(int64(delay))
	for _, c := range cut {
		d.cutDst[netip.MustParseAddr(c).As16()] = true
	}
	for i, name := range d.names {
		fd, err := openRaw(name)
		if err != nil {
			if i == 1 {
				unix.Close(d.ports[0])
			}
			return nil, err
		}
		d.ports[i] = fd
	}
	return d, nil
}

func openRaw(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, fmt.Errorf("delay line: interface %s: %w", ifname, err)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("delay line: packet socket: %w", err)
	}
	for _, s := range []struct {
		what string
		err  error
	}{
		{"ignore outgoing", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)},
		{"timestamps", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)},
		{"rcvbuf", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)},
		{"rcvtimeo", unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})},
		{"bind", unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})},
	} {
		if s.err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("delay line: %s on %s: %w", s.what, ifname, s.err)
		}
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// run forwards both directions until ctx ends, then closes the sockets.
func (d *delayLine) run(ctx context.Context) error {
	defer unix.Close(d.ports[0])
	defer unix.Close(d.ports[1])
	errs := make(chan error, 2)
	go func() { errs <- d.forward(ctx, 0, 1) }()
	go func() { errs <- d.forward(ctx, 1, 0) }()
	return errors.Join(<-errs, <-errs)
}

// cut starts (true) or ends (false) dropping the frames to the cut destinations.
func (d *delayLine) cut(on bool) { d.cutting.Store(on) }

// setDelay changes the one-way delay of the frames that arrive from now on (those queued keep
// theirs, so each direction stays in order when the delay grows).
func (d *delayLine) setDelay(delay time.Duration) { d.delay.Store(int64(delay)) }

func (d *delayLine) String() string {
	return fmt.Sprintf("delivered %d, cut %d, worst lateness %v", d.delivered.Load(), d.cutDrops.Load(), time.Duration(d.worstLate.Load()))
}

type frame struct {
	data    []byte
	deliver time.Time
}

func (d *delayLine) forward(ctx context.Context, in, out int) error {
	queue := make(chan frame, 1<<14)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for f := range queue {
			if wait := time.Until(f.deliver); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					continue
				}
			}
			if late := int64(time.Since(f.deliver)); late > d.worstLate.Load() {
				d.worstLate.Store(late)
			}
			if d.cutting.Load() && d.isCut(f.data) {
				d.cutDrops.Add(1)
				continue
			}
			if _, err := unix.Write(d.ports[out], f.data); err == nil {
				d.delivered.Add(1)
			}
		}
	}()
	defer func() {
		close(queue)
		wg.Wait()
	}()
	buf := make([]byte, 1<<16)
	oob := make([]byte, 128)
	for ctx.Err() == nil {
		n, oobn, _, _, err := unix.Recvmsg(d.ports[in], buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("delay line: read %s: %w", d.names[in], err)
		}
		data := append([]byte(nil), buf[:n]...)
		select {
		case queue <- frame{data: data, deliver: arrived(oob[:oobn]).Add(time.Duration(d.delay.Load()))}:
		default:
			return fmt.Errorf("delay line: %s: queue of %d frames full", d.names[in], cap(queue))
		}
	}
	return nil
}

// isCut reports whether an Ethernet frame is IPv6 to a cut destination.
func (d *delayLine) isCut(f []byte) bool {
	if len(f) < 14+40 || f[12] != 0x86 || f[13] != 0xdd {
		return false
	}
	return d.cutDst[[16]byte(f[14+24:14+40])]
}

// arrived is the kernel's receive stamp of a frame (so the delay counts from when the frame
// reached the wire, not from when this process got the CPU to read it), or now.
func arrived(oob []byte) time.Time {
	now := time.Now()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			if age := now.Sub(time.Unix(ts.Unix())); age >= 0 && age < time.Second {
				return now.Add(-age)
			}
		}
	}
	return now
}
