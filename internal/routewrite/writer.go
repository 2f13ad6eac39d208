package routewrite

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultBatch is how many routes one sendmsg carries at most. The messages are some 130
// bytes each (under the socket's default 212 KB send buffer at this count), and a batch whose
// every route fails queues one small error reply each.
const DefaultBatch = 512

// replyTimeout bounds the wait for the kernel's replies to one batch: it answers within the
// sendmsg, so a longer wait means a reply was lost.
const replyTimeout = 5 * time.Second

// Done is told what became of one queued route: nil when the kernel accepted it (a delete of
// a route that was not there, ESRCH, is accepted too), else the error, which names the route.
type Done func(err error)

type op struct {
	dst  netip.Addr
	del  bool
	done Done
	err  error
}

// Writer queues route replaces and deletes and writes them in batches. It is not safe for
// concurrent use: its owner (ilnpd's loop) queues during a turn and flushes at its end.
//
// Only the batch's last message asks for an acknowledgement (NLM_F_ACK): the kernel handles
// the messages of one sendmsg in order and answers a failed one with an error even without
// the flag, so the last one's answer says every error before it has been queued to the
// socket. A batch costs one sendmsg and one recvmsg plus one per failed route, where an ACK
// for each would cost a recvmsg each.
type Writer struct {
	fd    int
	max   int
	seq   uint32
	first uint32 // the batch's first sequence number
	buf   []byte
	last  int // offset of the batch's last message
	ops   []op
	rbuf  []byte
}

// Open opens the writer's NETLINK_ROUTE socket in the calling thread's network namespace.
// batch is the most routes one sendmsg carries (<= 0: DefaultBatch).
func Open(batch int) (*Writer, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("routewrite: netlink socket: %w", err)
	}
	if err := setup(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Writer{fd: fd, max: batch, seq: uint32(time.Now().UnixNano()), rbuf: make([]byte, 64<<10)}, nil
}

func setup(fd int) error {
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("routewrite: bind: %w", err)
	}
	// Error replies without a copy of the request (RFC 3549 leaves it to the implementation;
	// Linux copies it unless asked not to).
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		return fmt.Errorf("routewrite: NETLINK_CAP_ACK: %w", err)
	}
	// Room for a whole batch of error replies; without CAP_NET_ADMIN the default stays.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("routewrite: SO_RCVTIMEO: %w", err)
	}
	return nil
}

// Close flushes what is queued and closes the socket.
func (w *Writer) Close() error {
	err := w.Flush()
	return errors.Join(err, unix.Close(w.fd))
}

// Pending is how many routes are queued.
func (w *Writer) Pending() int { return len(w.ops) }

// Replace queues r as a replace (create or replace, `ip route replace`); done (may be nil) is
// called when its batch is flushed. A full batch is flushed first.
func (w *Writer) Replace(r Route, done Done) error { return w.queue(false, r, done) }

// Delete queues the deletion of r (`ip route del`), as Replace.
func (w *Writer) Delete(r Route, done Done) error { return w.queue(true, r, done) }

func (w *Writer) queue(del bool, r Route, done Done) error {
	if err := r.check(del); err != nil {
		return fmt.Errorf("route to %s: %w", r.Dst, err)
	}
	if len(w.ops) >= w.max {
		w.Flush()
	}
	if len(w.ops) == 0 {
		w.first = w.seq
	}
	w.last = len(w.buf)
	w.buf = appendMessage(w.buf, del, w.seq, 0, r)
	w.seq++
	w.ops = append(w.ops, op{dst: r.Dst, del: del, done: done})
	return nil
}

// Flush writes the queued routes in one sendmsg, reads the kernel's answers and calls each
// route's Done in the order queued. It returns an error only when the batch as a whole
// failed (each route's Done is told too).
func (w *Writer) Flush() error {
	if len(w.ops) == 0 {
		return nil
	}
	ops := w.ops
	err := w.exchange()
	w.buf, w.ops = w.buf[:0], nil // a Done may queue again
	for i := range ops {
		o := &ops[i]
		if o.done == nil {
			continue
		}
		if o.err != nil {
			verb := "write"
			if o.del {
				verb = "remove"
			}
			o.done(fmt.Errorf("%s route to %s: %w", verb, o.dst, o.err))
		} else {
			o.done(nil)
		}
	}
	if w.ops == nil {
		clear(ops)
		w.ops = ops[:0]
	}
	return err
}

// exchange sends the batch and sets each op's err from the replies.
func (w *Writer) exchange() error {
	ne.PutUint16(w.buf[w.last+6:], ne.Uint16(w.buf[w.last+6:])|unix.NLM_F_ACK)
	last := w.first + uint32(len(w.ops)) - 1
	failAll := func(err error) error {
		for i := range w.ops {
			if w.ops[i].err == nil {
				w.ops[i].err = err
			}
		}
		return err
	}
	for {
		err := unix.Sendto(w.fd, w.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return failAll(fmt.Errorf("routewrite: send %d routes: %w", len(w.ops), err))
		}
		break
	}
	for {
		n, from, err := unix.Recvfrom(w.fd, w.rbuf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// ENOBUFS: replies were dropped, so which routes failed is unknown; EAGAIN:
			// the acknowledgement never came. Either way no route of the batch is known
			// to be in place.
			return failAll(fmt.Errorf("routewrite: replies to %d routes: %w", len(w.ops), err))
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // only the kernel answers
		}
		done := false
		perr := parseReplies(w.rbuf[:n], func(r reply) {
			if r.seq-w.first > last-w.first {
				return // an earlier batch's, after a lost reply
			}
			o := &w.ops[r.seq-w.first]
			if r.errno != 0 && !(o.del && r.errno == unix.ESRCH) {
				o.err = r.errno
			}
			if r.seq == last {
				done = true
			}
		})
		if perr != nil {
			return failAll(perr)
		}
		if done {
			return nil
		}
	}
}
