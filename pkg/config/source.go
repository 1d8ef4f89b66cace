package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// SourceKind is what a value source (a --input VALUE, or a config input's data) holds.
type SourceKind int

// Source kinds.
const (
	// SourceFile is a .npy file, a .npz archive (all its members: a Dict[str, Tensor], or the
	// tensor of a one-member archive) or one member of it (FILE.npz:MEMBER).
	SourceFile SourceKind = iota + 1
	SourceInt
	SourceFloat
	SourceBool
	SourceStr
	SourceNone
	// SourceList is a comma-separated list of files: the items of a List[Tensor] or Tuple.
	SourceList
)

// Source is one parsed value source. The same syntax serves `--input [NAME=]VALUE` on the
// command line and model.inputs[].data in a config, so both resolve to the same thing:
//
//	x.npy, x.npz, x.npz:MEMBER   a tensor (the same on every call); a whole .npz is a dict
//	seq:CHUNKS.npy               call i takes slice i along dimension 0, in order
//	a.npy,seq:b.npy              the items of a List[Tensor] or Tuple argument
//	int:N float:X bool:true|false str:TEXT none
type Source struct {
	Text   string // as written
	Kind   SourceKind
	Path   string // SourceFile
	Member string // the .npz member ("" for a .npy or a whole .npz)
	Seq    bool   // SourceFile: one slice along dimension 0 per call
	Int    int64
	Float  float64
	Bool   bool
	Str    string
	Items  []Source // SourceList
}

// SourceSyntax describes the accepted forms, for messages.
const SourceSyntax = "a .npy or .npz path (FILE.npz:MEMBER for one member), seq:CHUNKS.npy (call i takes slice i), int:N, float:X, bool:true|false, str:TEXT or none"

// ParseSource reads one value source (see Source).
func ParseSource(text string) (Source, error) {
	s := Source{Text: text}
	prefix, rest, hasPrefix := strings.Cut(text, ":")
	switch {
	case text == "none":
		s.Kind = SourceNone
		return s, nil
	case hasPrefix && prefix == "str":
		s.Kind, s.Str = SourceStr, rest
		return s, nil
	case hasPrefix && prefix == "int":
		i, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		if err != nil {
			return s, fmt.Errorf("%q: %q is not a whole number, e.g. int:16000", text, rest)
		}
		s.Kind, s.Int = SourceInt, i
		return s, nil
	case hasPrefix && prefix == "float":
		f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return s, fmt.Errorf("%q: %q is not a number, e.g. float:0.5", text, rest)
		}
		s.Kind, s.Float = SourceFloat, f
		return s, nil
	case hasPrefix && prefix == "bool":
		switch strings.ToLower(strings.TrimSpace(rest)) {
		case "true":
			s.Kind, s.Bool = SourceBool, true
		case "false":
			s.Kind = SourceBool
		default:
			return s, fmt.Errorf("%q: want bool:true or bool:false", text)
		}
		return s, nil
	}
	if strings.Contains(text, ",") {
		s.Kind = SourceList
		for _, part := range strings.Split(text, ",") {
			it, err := ParseSource(strings.TrimSpace(part))
			if err != nil {
				return s, err
			}
			if it.Kind != SourceFile {
				return s, fmt.Errorf("%q: item %q: list items are tensor files (.npy, FILE.npz:MEMBER, seq:FILE.npy)", text, part)
			}
			s.Items = append(s.Items, it)
		}
		return s, nil
	}
	s.Kind = SourceFile
	path := text
	if p, ok := strings.CutPrefix(path, "seq:"); ok {
		s.Seq, path = true, p
	}
	if i := strings.LastIndex(path, ".npz:"); i >= 0 {
		path, s.Member = path[:i+4], path[i+5:]
		if s.Member == "" {
			return s, fmt.Errorf("%q: name the member after FILE.npz:, or drop the colon for every member", text)
		}
	}
	if !strings.HasSuffix(path, ".npy") && !strings.HasSuffix(path, ".npz") {
		return s, fmt.Errorf("%q is not a value torchspeed reads: give %s", text, SourceSyntax)
	}
	s.Path = path
	return s, nil
}

// String writes the source back in the syntax ParseSource reads.
func (s Source) String() string {
	switch s.Kind {
	case SourceFile:
		t := s.Path
		if s.Member != "" {
			t += ":" + s.Member
		}
		if s.Seq {
			t = "seq:" + t
		}
		return t
	case SourceList:
		parts := make([]string, len(s.Items))
		for i, it := range s.Items {
			parts[i] = it.String()
		}
		return strings.Join(parts, ",")
	}
	return s.Text
}

// Rebase makes the source's relative file paths relative to dir.
func (s Source) Rebase(dir string) Source {
	switch s.Kind {
	case SourceFile:
		if s.Path != "" && !filepath.IsAbs(s.Path) {
			s.Path = filepath.Join(dir, s.Path)
		}
	case SourceList:
		items := make([]Source, len(s.Items))
		for i, it := range s.Items {
			items[i] = it.Rebase(dir)
		}
		s.Items = items
	}
	s.Text = s.String()
	return s
}

var argName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// SplitInput splits a `--input [NAME=]VALUE` flag value: NAME is "" for a positional value.
func SplitInput(arg string) (name, value string) {
	if loc := argName.FindStringIndex(arg); loc != nil {
		return arg[:loc[1]-1], arg[loc[1]:]
	}
	return "", arg
}
