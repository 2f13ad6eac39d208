package sweep

import (
	"slices"
	"testing"
)

func TestPassSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items int
		limit int
		want  []int // sizes of the steps
	}{
		{"empty", 0, 10, nil},
		{"one step", 5, 10, []int{5}},
		{"exact", 20, 10, []int{10, 10}},
		{"remainder", 25, 10, []int{10, 10, 5}},
		{"limit zero still ends", 3, 0, []int{1, 1, 1}},
		{"negative limit", 2, -4, []int{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := make([]int, tc.items)
			for i := range items {
				items[i] = i
			}
			p := New(items)
			var sizes, seen []int
			for steps := 0; !p.Done(); steps++ {
				if steps > tc.items {
					t.Fatalf("pass does not end: %d steps over %d items", steps, tc.items)
				}
				before := p.Remaining()
				s := p.Step(tc.limit)
				if p.Remaining() != before-len(s) {
					t.Fatalf("Remaining %d after a step of %d from %d", p.Remaining(), len(s), before)
				}
				sizes = append(sizes, len(s))
				seen = append(seen, s...)
			}
			if !slices.Equal(sizes, tc.want) {
				t.Errorf("steps %v, want %v", sizes, tc.want)
			}
			if !slices.Equal(seen, items) && !(len(seen) == 0 && len(items) == 0) {
				t.Errorf("handed out %v, want every item once in order %v", seen, items)
			}
			if s := p.Step(tc.limit); s != nil {
				t.Errorf("a done pass handed out %v", s)
			}
		})
	}
}

// A step's slice cannot grow into the entries the next step hands out.
func TestStepIsCapped(t *testing.T) {
	p := New([]int{1, 2, 3, 4})
	s := p.Step(2)
	_ = append(s, 99)
	if next := p.Step(2); !slices.Equal(next, []int{3, 4}) {
		t.Fatalf("an append to one step changed the next: %v", next)
	}
}

func TestNilPass(t *testing.T) {
	var p *Pass[int]
	if !p.Done() || p.Remaining() != 0 || p.Step(5) != nil {
		t.Fatal("a nil pass is not an empty, done one")
	}
}
