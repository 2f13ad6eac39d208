// Command ilnpctl inspects and steers a running ilnpd, in the style of iproute2.
//
//	ilnpctl [-s SOCKET] [-j] show locators|sessions|peers|stats|config
//	ilnpctl [-s SOCKET] [-j] events [-f|--follow]
//	ilnpctl [-s SOCKET] set handoff soft|hard
//	ilnpctl [-s SOCKET] set tcp-aware on|off
//	ilnpctl [-s SOCKET] peer add NAME ILV...
//
// Commands and table names may be abbreviated (`ilnpctl sh loc`). -j prints JSON: the daemon's
// value for show, one event object per line for events.
//
// An ILV is written as an IPv6 address (2001:db8:1:0:214:4fff:fe20:ee64), as L64,NID
// (2001:db8:1::,0214:4fff:fe20:ee64 or 2001:0db8:0001:0000,0214:4fff:fe20:ee64), or in the
// hosts-file form L64|PREFERENCE,NID. Without an explicit preference the ILVs are ranked in the
// order given: the first gets preference 0 (lower is more preferred, RFC 6742).
//
// ilnpctl talks to ilnpd over its control socket (default /run/ilnpd/ctl.sock; ilnpd puts it in
// its state-dir). Exit status: 0 success, 1 the daemon failed or is not running, 2 bad usage.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"ilnp/internal/control"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

const usage = `usage: ilnpctl [-s SOCKET] [-j] COMMAND
  show locators|sessions|peers|stats   print a table (-j: JSON)
  show config                          the configuration in effect (after a SIGHUP reload)
  events [-f|--follow]                 print the event timeline (-j: JSON lines)
  show paths                          per session and locator pair: state, RTT, loss, bytes
  set handoff soft|hard                switch the handoff mode
  set tcp-aware on|off                 switch the mobility-aware TCP reactions
  set policy newest|preference|quality switch the handoff policy
  peer add NAME ILV...                 register an ILNP peer; ILV is an IPv6 address,
                                       L64,NID or L64|PREFERENCE,NID
  flush                                stop ilnpd for good: detach the datapath, remove its
                                       pins, routes, addresses and state (ends every session)
options:
  -s SOCKET   control socket (default ` + control.DefaultSocket + `)
  -j          JSON output
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ilnpctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("s", control.DefaultSocket, "")
	jsonOut := fs.Bool("j", false, "")
	help := fs.Bool("h", false, "")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "ilnpctl: %v\n%s", err, usage)
		return 2
	}
	if *help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	cli := &cli{client: control.Client{Socket: *socket}, json: *jsonOut, out: stdout}
	err := cli.dispatch(ctx, fs.Args())
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "ilnpctl: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "ilnpctl: %v\n", err)
		return 1
	}
}

type cli struct {
	client control.Client
	json   bool
	out    io.Writer
}

// match resolves an abbreviated word against choices (unique prefix), as iproute2 does.
func match(word string, choices ...string) (string, bool) {
	found := ""
	for _, c := range choices {
		if c == word {
			return c, true
		}
		if strings.HasPrefix(c, word) && word != "" {
			if found != "" {
				return "", false
			}
			found = c
		}
	}
	return found, found != ""
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, ok := match(args[0], "show", "events", "set", "peer", "flush", "help")
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	args = args[1:]
	switch cmd {
	case "help":
		fmt.Fprint(c.out, usage)
		return nil
	case "show":
		if len(args) != 1 {
			return usagef("show: want one of locators, sessions, peers, stats, config, paths")
		}
		names := make([]string, len(control.Whats))
		for i, w := range control.Whats {
			names[i] = string(w)
		}
		what, ok := match(args[0], names...)
		if !ok {
			return usagef("show: unknown table %q", args[0])
		}
		return c.show(ctx, control.What(what))
	case "events":
		follow := false
		for _, a := range args {
			switch a {
			case "-f", "--follow", "-follow", "follow":
				follow = true
			case "-j":
				c.json = true
			default:
				return usagef("events: unknown argument %q", a)
			}
		}
		return c.events(ctx, follow)
	case "set":
		if len(args) != 2 {
			return usagef("set: want \"set handoff soft|hard\", \"set tcp-aware on|off\" or \"set policy NAME\"")
		}
		setting, ok := match(args[0], "handoff", "tcp-aware", "policy")
		if !ok {
			return usagef("set: unknown setting %q", args[0])
		}
		if setting == "tcp-aware" {
			if args[1] != "on" && args[1] != "off" {
				return usagef("set tcp-aware: want on or off, got %q", args[1])
			}
			return c.client.SetTCPAware(ctx, args[1])
		}
		if setting == "policy" {
			return c.client.SetPolicy(ctx, args[1])
		}
		if args[1] != "soft" && args[1] != "hard" {
			return usagef("set handoff: want soft or hard, got %q", args[1])
		}
		return c.client.SetHandoff(ctx, args[1])
	case "flush":
		if len(args) != 0 {
			return usagef("flush: no arguments")
		}
		return c.client.Flush(ctx, 15*time.Second)
	case "peer":
		if len(args) < 3 {
			return usagef("peer: want \"peer add NAME ILV...\"")
		}
		if _, ok := match(args[0], "add"); !ok {
			return usagef("peer: unknown subcommand %q", args[0])
		}
		ilvs, err := parseILVs(args[2:])
		if err != nil {
			return usagef("peer add: %v", err)
		}
		return c.client.AddPeer(ctx, args[1], ilvs)
	}
	return usagef("unknown command %q", cmd)
}

// parseILVs checks every ILV locally (so a typo is a usage error, not a daemon error) and
// ranks them: an explicit |PREFERENCE wins, otherwise the position.
func parseILVs(args []string) ([]control.PeerILV, error) {
	out := make([]control.PeerILV, 0, len(args))
	for i, a := range args {
		text, pref := a, uint64(i)
		if loc, rest, ok := strings.Cut(a, "|"); ok {
			p, nid, ok := strings.Cut(rest, ",")
			if !ok {
				return nil, fmt.Errorf("%q: want L64|PREFERENCE,NID", a)
			}
			var err error
			if pref, err = strconv.ParseUint(p, 10, 16); err != nil {
				return nil, fmt.Errorf("%q: preference %q: want 0 to 65535", a, p)
			}
			text = loc + "," + nid
		}
		v, err := wire.ParseILV(text)
		if err != nil {
			return nil, err
		}
		if v.NID == 0 {
			return nil, fmt.Errorf("%q: NID is zero", a)
		}
		out = append(out, control.PeerILV{ILV: v.Addr().String(), Preference: uint16(pref)})
	}
	return out, nil
}

func (c *cli) show(ctx context.Context, what control.What) error {
	data, err := c.client.Show(ctx, what)
	if err != nil {
		return err
	}
	if c.json {
		var buf bytes.Buffer
		if err := json.Indent(&buf, data, "", "  "); err != nil {
			return fmt.Errorf("bad JSON from ilnpd: %w", err)
		}
		buf.WriteByte('\n')
		_, err := c.out.Write(buf.Bytes())
		return err
	}
	v, err := decodeOrdered(data)
	if err != nil {
		return fmt.Errorf("bad JSON from ilnpd: %w", err)
	}
	return render(c.out, v)
}

func (c *cli) events(ctx context.Context, follow bool) error {
	enc := json.NewEncoder(c.out)
	return c.client.Events(ctx, follow, func(e timeline.Event) error {
		if c.json {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(c.out, formatEvent(e))
		return err
	})
}

// formatEvent prints an event as "SECONDS TYPE key=value...", seconds of CLOCK_MONOTONIC.
func formatEvent(e timeline.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d.%06d %-17s", e.MonoNS/1e9, e.MonoNS%1e9/1e3, e.Kind)
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	kv("node", e.Node)
	kv("iface", e.Iface)
	kv("locator", e.Locator)
	kv("peer", e.Peer)
	if e.Attempt != 0 {
		kv("attempt", strconv.Itoa(e.Attempt))
	}
	if e.Seq != 0 {
		kv("seq", strconv.FormatUint(uint64(e.Seq), 10))
	}
	if e.Duration != 0 {
		kv("duration_ms", strconv.FormatFloat(float64(e.Duration)/1e6, 'f', 3, 64))
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " detail=%q", e.Detail)
	}
	return b.String()
}

// Ordered JSON: tables keep the daemon's field order as columns.

type member struct {
	key string
	val any
}

type object []member

func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var o object
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o = append(o, member{k, v})
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return tok, nil
	}
}

func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		if v == "" {
			return "-"
		}
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = cell(x)
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ",")
	case object:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = m.key + "=" + cell(m.val)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// render prints a list of objects as an aligned table (header: upper-case keys, columns in
// first-seen order), an object as aligned "key value" lines, anything else as one line.
func render(w io.Writer, v any) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	switch v := v.(type) {
	case []any:
		var cols []string
		seen := map[string]bool{}
		for _, row := range v {
			o, ok := row.(object)
			if !ok {
				fmt.Fprintln(tw, cell(row))
				continue
			}
			for _, m := range o {
				if !seen[m.key] {
					seen[m.key] = true
					cols = append(cols, m.key)
				}
			}
		}
		if len(cols) > 0 {
			head := make([]string, len(cols))
			for i, c := range cols {
				head[i] = strings.ToUpper(c)
			}
			fmt.Fprintln(tw, strings.Join(head, "\t"))
			for _, row := range v {
				o, ok := row.(object)
				if !ok {
					continue
				}
				byKey := map[string]any{}
				for _, m := range o {
					byKey[m.key] = m.val
				}
				cells := make([]string, len(cols))
				for i, c := range cols {
					cells[i] = cell(byKey[c])
				}
				fmt.Fprintln(tw, strings.Join(cells, "\t"))
			}
		}
	case object:
		for _, m := range v {
			fmt.Fprintf(tw, "%s\t%s\n", m.key, cell(m.val))
		}
	case nil: // an empty table marshalled from a nil slice
	default:
		fmt.Fprintln(tw, cell(v))
	}
	return tw.Flush()
}
