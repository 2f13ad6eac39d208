package linkemu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Port is an AF_PACKET socket bound to one interface. Open it with the calling thread inside
// the interface's namespace; afterwards it can be used from any goroutine.
type Port struct {
	fd   int
	Name string
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// OpenPort binds a raw packet socket to ifname. Outgoing packets are ignored so that frames
// the forwarder writes are not read back.
func OpenPort(ifname string) (*Port, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("linkemu: interface %s: %w", ifname, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("linkemu: packet socket: %w", err)
	}
	p := &Port{fd: fd, Name: ifname}
	steps := []struct {
		what string
		err  error
	}{
		{"ignore outgoing", unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)},
		// Kernel arrival stamps: the delay counts from when the frame arrived, not from
		// when this process got the CPU to read it.
		{"timestamps", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)},
		{"rcvbuf", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)},
		{"sndbuf", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)},
		// A receive timeout lets the reader notice cancellation without closing under it.
		{"rcvtimeo", unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})},
		{"bind", unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})},
	}
	for _, s := range steps {
		if s.err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("linkemu: %s on %s: %w", s.what, ifname, s.err)
		}
	}
	return p, nil
}

// Close releases the socket.
func (p *Port) Close() error { return unix.Close(p.fd) }

// Stats counts what one direction did.
type Stats struct {
	Received   atomic.Uint64
	Sent       atomic.Uint64
	LossDrops  atomic.Uint64
	QueueDrops atomic.Uint64
	SendErrors atomic.Uint64
	lastLateNS atomic.Int64
}

func (s *Stats) String() string {
	return fmt.Sprintf("rx %d tx %d loss %d queue-drop %d send-err %d timer-late %v",
		s.Received.Load(), s.Sent.Load(), s.LossDrops.Load(), s.QueueDrops.Load(), s.SendErrors.Load(), time.Duration(s.lastLateNS.Load()))
}

type packet struct {
	data    []byte
	deliver time.Time
}

// scheduler decides, for one direction, whether and when each packet leaves. It is pure
// logic on arrival times so it can be tested without sockets.
type scheduler struct {
	shape       Shape
	rng         *rand.Rand
	linkFree    time.Time // when the serialiser finishes the last accepted packet
	lastDeliver time.Time
}

func newScheduler(shape Shape, seed uint64) *scheduler {
	if shape.QueueBytes == 0 {
		shape.QueueBytes = DefaultQueueBytes
	}
	return &scheduler{shape: shape, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type verdict int

const (
	pass verdict = iota
	dropLoss
	dropQueue
)

// admit returns the delivery time of a frame of n bytes that arrived at now.
func (s *scheduler) admit(now time.Time, n int) (time.Time, verdict) {
	if s.shape.Loss > 0 && s.rng.Float64() < s.shape.Loss {
		return time.Time{}, dropLoss
	}
	depart := now
	if s.shape.RateBps > 0 {
		start := now
		if s.linkFree.After(start) {
			start = s.linkFree
		}
		backlogBytes := start.Sub(now).Seconds() * s.shape.RateBps / 8
		if backlogBytes+float64(n) > float64(s.shape.QueueBytes) {
			return time.Time{}, dropQueue
		}
		s.linkFree = start.Add(time.Duration(float64(n) * 8 / s.shape.RateBps * 1e9))
		depart = s.linkFree
	}
	delay := s.shape.Delay
	if s.shape.Jitter > 0 {
		delay += time.Duration(s.rng.NormFloat64() * float64(s.shape.Jitter))
		if delay < 0 {
			delay = 0
		}
	}
	deliver := depart.Add(delay)
	if !s.shape.Reorder && deliver.Before(s.lastDeliver) {
		deliver = s.lastDeliver
	}
	if deliver.After(s.lastDeliver) {
		s.lastDeliver = deliver
	}
	return deliver, pass
}

// Forward moves frames from in to out with shape applied until ctx ends.
func Forward(ctx context.Context, in, out *Port, shape Shape, stats *Stats) error {
	sched := newScheduler(shape, uint64(time.Now().UnixNano()))
	queue := make(chan packet, 1<<16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		// Timers wake late by a fairly steady amount; aim early by a running estimate of it
		// so the mean delay stays on target (a busy wait would cost a core at line rate).
		var lateness time.Duration
		for p := range queue {
			if wait := time.Until(p.deliver) - lateness; wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					// Drain without sending; the reader closes the queue.
					continue
				}
				raw := time.Since(p.deliver) + lateness // how late the timer itself fired
				lateness += (raw - lateness) / 4
				stats.lastLateNS.Store(int64(raw))
				if lateness < 0 {
					lateness = 0
				} else if lateness > 2*time.Millisecond {
					lateness = 2 * time.Millisecond
				}
			}
			send(out, p.data, stats)
		}
	}()
	defer func() {
		close(queue)
		wg.Wait()
	}()

	buf := make([]byte, 1<<16)
	oob := make([]byte, 128)
	for ctx.Err() == nil {
		n, oobn, _, _, err := unix.Recvmsg(in.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.ENETDOWN) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("linkemu: read %s: %w", in.Name, err)
		}
		now := arrival(oob[:oobn])
		stats.Received.Add(1)
		deliver, v := sched.admit(now, n)
		switch v {
		case dropLoss:
			stats.LossDrops.Add(1)
			continue
		case dropQueue:
			stats.QueueDrops.Add(1)
			continue
		}
		data := make([]byte, n)
		copy(data, buf[:n])
		if shape.Reorder {
			time.AfterFunc(time.Until(deliver), func() { send(out, data, stats) })
			continue
		}
		select {
		case queue <- packet{data: data, deliver: deliver}:
		default:
			stats.QueueDrops.Add(1)
		}
	}
	return nil
}

func send(out *Port, data []byte, stats *Stats) {
	if _, err := unix.Write(out.fd, data); err != nil {
		// The far interface may be down (the MN left): a real wire loses the frame too.
		stats.SendErrors.Add(1)
		return
	}
	stats.Sent.Add(1)
}

// Link is one emulated link: frames between interfaces A and B, shaped per direction.
type Link struct {
	A, B       string
	AtoB, BtoA Shape
	Stats      [2]Stats // [0] A->B, [1] B->A
	ports      [2]*Port
}

// Open binds both ends; call with the thread inside the wire namespace.
func (l *Link) Open() error {
	a, err := OpenPort(l.A)
	if err != nil {
		return err
	}
	b, err := OpenPort(l.B)
	if err != nil {
		a.Close()
		return err
	}
	l.ports = [2]*Port{a, b}
	return nil
}

// Run forwards both directions until ctx ends, then closes the sockets.
func (l *Link) Run(ctx context.Context) error {
	if l.ports[0] == nil {
		return fmt.Errorf("linkemu: link %s-%s not opened", l.A, l.B)
	}
	defer l.ports[0].Close()
	defer l.ports[1].Close()
	errs := make(chan error, 2)
	go func() { errs <- Forward(ctx, l.ports[0], l.ports[1], l.AtoB, &l.Stats[0]) }()
	go func() { errs <- Forward(ctx, l.ports[1], l.ports[0], l.BtoA, &l.Stats[1]) }()
	return errors.Join(<-errs, <-errs)
}

// arrival is the kernel's receive stamp of a frame, or now when there is none.
func arrival(oob []byte) time.Time {
	now := time.Now()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			t := time.Unix(ts.Unix())
			// Keep the monotonic reading of now, shifted back by the queueing time, so
			// later arithmetic is immune to wall-clock steps.
			if age := now.Sub(t); age >= 0 && age < time.Second {
				return now.Add(-age)
			}
		}
	}
	return now
}
