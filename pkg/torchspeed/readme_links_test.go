package torchspeed_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinks checks every relative link of the README and of docs/*.md: the README must
// stand alone in a clone, so each link names a file the repository holds (never one a build
// writes) and each #anchor a heading of the page it points to.
func TestDocsLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range pages {
		rel, _ := filepath.Rel(root, page)
		for _, m := range link.FindAllStringSubmatch(markdownProse(t, page), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
			}
			inRepo, err := filepath.Rel(root, path)
			if err != nil || strings.HasPrefix(inRepo, "..") || strings.HasPrefix(filepath.ToSlash(inRepo), "build/") {
				t.Errorf("%s links %q, outside what a clone holds", rel, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %q: %v", rel, target, err)
				continue
			}
			if anchor != "" && !headingAnchors(t, path)[anchor] {
				t.Errorf("%s links %q: %s has no heading with that anchor", rel, target, inRepo)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d relative links found in the README and docs/*.md: is the link pattern stale?", checked)
	}
}

// markdownProse is a Markdown file without its fenced code blocks, whose text is not links.
func markdownProse(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(l + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b.String()
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings: lower case, spaces
// to hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	if !strings.HasSuffix(path, ".md") {
		return anchors
	}
	for _, l := range strings.Split(markdownProse(t, path), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}
