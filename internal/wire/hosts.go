package wire

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// HostEntry is one I-LV line of a hosts file in the thesis format (s.3.2.2):
//
//	L64|preference,NID hostname [alias...]
//
// e.g. "2001:1111:0000:0000|10,021b:21ff:fe67:97a8 ilnp-linux1".
//
// The locator may also be an IPv4 address, with the UDP port on which its node receives
// ILNPv6 in UDP/IPv4 (issue 14; default DefaultIPv4Port), for a node reachable over IPv4:
//
//	198.51.100.2|20,0214:4fff:fe20:cc01 cn
//	198.51.100.2:4500|30,0214:4fff:fe20:cc01 cn
//
// It is kept as the L64 0x0000 | port | IPv4 address (internal/encap) and written back in
// that form by String.
type HostEntry struct {
	ILV ILV
	// Preference ranks the locator among the name's locators. As for the
	// L64 DNS record (RFC 6742 s.2.3) and the Locator Update (RFC 6743 s.2,
	// which reuses the L64 semantics), a LOWER value is MORE preferred.
	Preference uint16
	Names      []string // canonical name first, then aliases, as written
	Line       int      // 1-based line in the file
}

// String returns the entry in the hosts-file format.
func (e HostEntry) String() string {
	return e.ILV.Locator.String() + "|" + strconv.Itoa(int(e.Preference)) + "," +
		e.ILV.NID.String() + " " + strings.Join(e.Names, " ")
}

// Hosts is a parsed hosts file. The zero value is an empty file.
type Hosts struct {
	entries []HostEntry
	byName  map[string][]int // hostKey(name) -> entry indexes in file order
}

// HostsError is a rejected hosts-file line.
type HostsError struct {
	File   string
	Line   int
	Reason string
}

func (e *HostsError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// maxHostsErrors bounds how many bad lines one error reports.
const maxHostsErrors = 20

// maxHostsLine bounds one hosts-file line.
const maxHostsLine = 4096

// ParseHosts reads a hosts file. Blank lines and "#" comments are skipped;
// ordinary hosts lines whose first field is an IP address are ignored, so an
// /etc/hosts mixing both kinds parses. Every other line must be an I-LV
// entry (see HostEntry); one name may have several lines (several L64s, or
// several NIDs). A name listing the same I-LV twice is an error. Errors name
// the file, the line and the reason; all bad lines (up to 20) are reported
// and no Hosts is returned.
func ParseHosts(r io.Reader, filename string) (Hosts, error) {
	var (
		h    Hosts
		errs []error
		seen = map[string]map[ILV]int{} // name -> I-LV -> line
	)
	fail := func(line int, format string, args ...any) {
		if len(errs) < maxHostsErrors {
			errs = append(errs, &HostsError{File: filename, Line: line, Reason: fmt.Sprintf(format, args...)})
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxHostsLine)
	line := 0
	for sc.Scan() {
		line++
		e, ok, err := parseHostsLine(sc.Text())
		if err != nil {
			fail(line, "%v", err)
			continue
		}
		if !ok {
			continue
		}
		e.Line = line
		for _, n := range e.Names {
			k := hostKey(n)
			if seen[k] == nil {
				seen[k] = map[ILV]int{}
			}
			if first, dup := seen[k][e.ILV]; dup {
				fail(line, "%s: I-LV %v already listed on line %d", n, e.ILV, first)
				continue
			}
			seen[k][e.ILV] = line
		}
		h.add(e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			fail(line+1, "line longer than %d bytes", maxHostsLine)
		} else {
			errs = append(errs, fmt.Errorf("%s: read after line %d: %w", filename, line, err))
		}
	}
	if len(errs) > 0 {
		return Hosts{}, errors.Join(errs...)
	}
	return h, nil
}

func (h *Hosts) add(e HostEntry) {
	if h.byName == nil {
		h.byName = map[string][]int{}
	}
	i := len(h.entries)
	h.entries = append(h.entries, e)
	for _, n := range e.Names {
		k := hostKey(n)
		if idx := h.byName[k]; len(idx) == 0 || idx[len(idx)-1] != i {
			h.byName[k] = append(idx, i)
		}
	}
}

// parseHostsLine returns ok=false for lines that hold no I-LV entry.
func parseHostsLine(s string) (HostEntry, bool, error) {
	if i := strings.IndexByte(s, '#'); i >= 0 {
		s = s[:i]
	}
	f := strings.Fields(s)
	if len(f) == 0 {
		return HostEntry{}, false, nil
	}
	if _, err := netip.ParseAddr(f[0]); err == nil {
		// An ordinary hosts line, unless it is an I-LV split by blanks.
		if strings.ContainsAny(s, "|,") {
			return HostEntry{}, false, fmt.Errorf("%q: an address followed by '|' or ','; write L64|preference,NID without blanks", strings.Join(f, " "))
		}
		return HostEntry{}, false, nil
	}
	if len(f) < 2 {
		return HostEntry{}, false, fmt.Errorf("%q: no hostname after the I-LV", f[0])
	}
	locPref, nidText, ok := strings.Cut(f[0], ",")
	if !ok {
		return HostEntry{}, false, fmt.Errorf("%q: want L64|preference,NID", f[0])
	}
	locText, prefText, ok := strings.Cut(locPref, "|")
	if !ok {
		return HostEntry{}, false, fmt.Errorf("%q: missing |preference after the L64", f[0])
	}
	loc, err := parseHostsLocator(locText)
	if err != nil {
		return HostEntry{}, false, err
	}
	pref, err := strconv.ParseUint(prefText, 10, 16)
	if err != nil {
		return HostEntry{}, false, fmt.Errorf("preference %q: want an integer 0 to 65535", prefText)
	}
	nid, err := ParseNID(nidText)
	if err != nil {
		return HostEntry{}, false, err
	}
	for _, n := range f[1:] {
		if err := checkHostname(n); err != nil {
			return HostEntry{}, false, err
		}
	}
	return HostEntry{ILV: ILV{Locator: loc, NID: nid}, Preference: uint16(pref), Names: f[1:]}, true, nil
}

// DefaultIPv4Port is the UDP port of an IPv4 locator written without one (hosts file) or
// read from a DNS L32 record (RFC 6742 s.2.2, which has no port): the default encapsulation
// port (encap.DefaultPort, ilnpd.conf encap-port).
const DefaultIPv4Port = 49191

// parseHostsLocator reads an L64, or an IPv4 address with an optional :port as the L64
// 0x0000 | port | address.
func parseHostsLocator(text string) (L64, error) {
	if strings.Count(text, ":") > 1 || !strings.Contains(text, ".") {
		return ParseL64(text)
	}
	ap, err := netip.ParseAddrPort(text)
	if err != nil {
		a, aerr := netip.ParseAddr(text)
		if aerr != nil {
			return 0, fmt.Errorf("locator %q: want an L64, IPv4 or IPv4:port", text)
		}
		ap = netip.AddrPortFrom(a, DefaultIPv4Port)
	}
	if !ap.Addr().Is4() || ap.Addr().IsUnspecified() || ap.Port() == 0 {
		return 0, fmt.Errorf("locator %q: want a non-zero IPv4 address and port", text)
	}
	b := ap.Addr().As4()
	return L64(uint64(ap.Port())<<32 | uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])), nil
}

// checkHostname accepts RFC 952/1123 style names (letters, digits, '-',
// '.', and '_' as seen in the wild) of at most 253 characters.
func checkHostname(n string) error {
	if len(n) > 253 {
		return fmt.Errorf("hostname %.20q...: longer than 253 characters", n)
	}
	for _, c := range []byte(n) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return fmt.Errorf("hostname %q: character %q not allowed", n, c)
		}
	}
	if strings.Trim(n, ".") == "" {
		return fmt.Errorf("hostname %q: empty", n)
	}
	return nil
}

// hostKey folds case and a trailing dot: host names are case-insensitive.
func hostKey(n string) string { return strings.ToLower(strings.TrimSuffix(n, ".")) }

// Entries returns the entries for name (case-insensitive), most preferred
// (lowest Preference) first; equal preferences keep file order.
func (h Hosts) Entries(name string) []HostEntry {
	idx := h.byName[hostKey(name)]
	out := make([]HostEntry, 0, len(idx))
	for _, i := range idx {
		out = append(out, h.entries[i])
	}
	slices.SortStableFunc(out, func(a, b HostEntry) int { return cmp.Compare(a.Preference, b.Preference) })
	return out
}

// Lookup returns the I-LVs of name, most preferred (lowest Preference)
// first, or nil if the name is unknown.
func (h Hosts) Lookup(name string) []ILV {
	es := h.Entries(name)
	if len(es) == 0 {
		return nil
	}
	out := make([]ILV, len(es))
	for i, e := range es {
		out[i] = e.ILV
	}
	return out
}

// LookupRanked is Lookup in the form ILVsFromRRs returns, so a resolver can
// treat hosts-file and DNS answers alike (NIDPreference and TTL are 0).
func (h Hosts) LookupRanked(name string) []RankedILV {
	es := h.Entries(name)
	if len(es) == 0 {
		return nil
	}
	out := make([]RankedILV, len(es))
	for i, e := range es {
		out[i] = RankedILV{ILV: e.ILV, Preference: e.Preference}
	}
	return out
}

// LookupAddr returns the names of the entries whose I-LV is v, in file order.
func (h Hosts) LookupAddr(v ILV) []string {
	var out []string
	for _, e := range h.entries {
		if e.ILV == v {
			out = append(out, e.Names...)
		}
	}
	return out
}

// All returns every entry in file order.
func (h Hosts) All() []HostEntry { return slices.Clone(h.entries) }

// Len is the number of I-LV entries.
func (h Hosts) Len() int { return len(h.entries) }

// AppendText appends the entries in the hosts-file format, one per line, in
// file order. ParseHosts of the result gives the same entries.
func (h Hosts) AppendText(b []byte) ([]byte, error) {
	for _, e := range h.entries {
		b = append(b, e.String()...)
		b = append(b, '\n')
	}
	return b, nil
}
