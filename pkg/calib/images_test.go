package calib

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// pattern is a deterministic test picture: smooth gradients plus a hashed texture, so
// resampling differences show up but stay bounded.
func pattern(seed, w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			n := uint32((x*73856093)^(y*19349663)^(seed*83492791)) % 61
			img.SetNRGBA(x, y, color.NRGBA{
				R: uint8((x*255/max(w-1, 1) + int(n)) % 256),
				G: uint8((y*255/max(h-1, 1) + seed*40) % 256),
				B: uint8((x*y + int(n)*3 + seed) % 256),
				A: 255,
			})
		}
	}
	return img
}

// smooth is a gentle gradient, which JPEG keeps to within a few intensity levels.
func smooth(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{R: uint8(100 + 4*x), G: uint8(60 + 8*y), B: uint8(150 - 2*x - 2*y), A: 255})
		}
	}
	return img
}

func writeImage(t *testing.T, path string, img image.Image) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var err error
	if strings.HasSuffix(path, ".png") {
		err = png.Encode(&buf, img)
	} else {
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImagePixels checks layout, channel order, scaling and normalization on a 2x2
// image whose expected tensor is written out by hand.
func TestImagePixels(t *testing.T) {
	dir := t.TempDir()
	img := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	img.SetNRGBA(0, 0, color.NRGBA{255, 0, 0, 255})
	img.SetNRGBA(1, 0, color.NRGBA{0, 255, 0, 255})
	img.SetNRGBA(0, 1, color.NRGBA{0, 0, 255, 255})
	img.SetNRGBA(1, 1, color.NRGBA{51, 102, 153, 128}) // alpha is dropped, as PIL's convert("RGB")
	writeImage(t, filepath.Join(dir, "a.png"), img)
	const m, s = 0.5, 0.25
	n := func(v float32) float32 { return (v/255 - m) / s }
	cases := []struct {
		name  string
		opt   ImageOptions
		shape []int64
		dtype string
		want  any
	}{
		{"NCHW RGB", ImageOptions{Mean: []float32{m}, Std: []float32{s}}, []int64{1, 3, 2, 2}, "float32",
			[]float32{n(255), n(0), n(0), n(51), n(0), n(255), n(0), n(102), n(0), n(0), n(255), n(153)}},
		{"NHWC BGR", ImageOptions{Mean: []float32{m}, Std: []float32{s}, ColorOrder: "bgr", Layout: "NHWC"}, []int64{1, 2, 2, 3}, "float32",
			[]float32{n(0), n(0), n(255), n(0), n(255), n(0), n(255), n(0), n(0), n(153), n(102), n(51)}},
		{"per-channel mean, scale 1", ImageOptions{Mean: []float32{1, 2, 3}, Std: []float32{1, 2, 4}, Scale: 1}, []int64{1, 3, 2, 2}, "float32",
			[]float32{254, -1, -1, 50, -1, 126.5, -1, 50, -0.75, -0.75, 63, 37.5}},
		{"grayscale", ImageOptions{}, []int64{1, 1, 2, 2}, "float32",
			[]float32{float32(76) / 255, float32(150) / 255, float32(29) / 255, float32(93) / 255}},
		{"uint8 raw", ImageOptions{}, []int64{1, 3, 2, 2}, "uint8",
			[]uint8{255, 0, 0, 51, 0, 255, 0, 102, 0, 0, 255, 153}},
		{"crop with zero padding", ImageOptions{CropSize: 3, Scale: 1}, []int64{1, 1, 3, 3}, "float32",
			[]float32{76, 150, 0, 29, 93, 0, 0, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Open(Source{Kind: "images", Path: dir, Image: c.opt}, []InputSpec{{Name: "img", Shape: c.shape, DType: c.dtype}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := d.Batch(0)
			if !slices.Equal(b.Inputs[0].Shape, c.shape) {
				t.Errorf("shape %v, want %v", b.Inputs[0].Shape, c.shape)
			}
			if fmt.Sprint(b.Inputs[0].Data) != fmt.Sprint(c.want) {
				t.Errorf("data\n got %v\nwant %v", b.Inputs[0].Data, c.want)
			}
		})
	}
}

func TestImageFolderLayout(t *testing.T) {
	dir := t.TempDir()
	// Classes sorted by name; files by directory then name (Python's sorted(os.walk)).
	writeImage(t, filepath.Join(dir, "dog", "b.png"), pattern(1, 8, 8))
	writeImage(t, filepath.Join(dir, "dog", "a.jpg"), smooth(8, 8)) // JPEG: no texture to smear
	writeImage(t, filepath.Join(dir, "cat", "z.png"), pattern(3, 8, 8))
	writeImage(t, filepath.Join(dir, "cat", "sub", "c.JPEG"), pattern(4, 8, 8))
	writeImage(t, filepath.Join(dir, "cat", "m.png"), pattern(5, 8, 8))
	os.WriteFile(filepath.Join(dir, "cat", "notes.txt"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, ".cache"), 0o755)
	var last [2]int
	d, err := Open(Source{Path: dir, BatchSize: 2, Progress: func(done, total int) { last = [2]int{done, total} }},
		[]InputSpec{{Name: "x", Shape: []int64{-1, 3, 8, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Classes(), []string{"cat", "dog"}) || !slices.Equal(d.Labels(), []int64{0, 0, 0, 1, 1}) {
		t.Errorf("classes %v labels %v", d.Classes(), d.Labels())
	}
	var names []string
	for i := range d.Len() {
		rel, _ := filepath.Rel(dir, d.SampleName(i))
		names = append(names, filepath.ToSlash(rel))
	}
	if want := []string{"cat/m.png", "cat/z.png", "cat/sub/c.JPEG", "dog/a.jpg", "dog/b.png"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
	if last != [2]int{5, 5} {
		t.Errorf("last progress %v", last)
	}
	// The PNG sample must be the exact pixels; the JPEG one close to them.
	b, _ := d.Batch(0)
	px := b.Inputs[0].Data.([]float32)
	if want := float32(pattern(5, 8, 8).NRGBAAt(3, 2).G) / 255; px[64+2*8+3] != want {
		t.Errorf("m.png G(3,2) = %v, want %v", px[64+2*8+3], want)
	}
	b, _ = d.Batch(1)
	jp := b.Inputs[0].Data.([]float32)[3*64:] // dog/a.jpg
	var worst float64
	ref := smooth(8, 8)
	for y := range 8 {
		for x := range 8 {
			worst = math.Max(worst, math.Abs(float64(jp[64+y*8+x])-float64(ref.NRGBAAt(x, y).G)/255))
		}
	}
	if worst > 0.03 {
		t.Errorf("JPEG green channel off by %.3f", worst)
	}
	if !strings.Contains(d.Describe(), "ImageFolder, 2 classes") {
		t.Errorf("Describe() = %q", d.Describe())
	}

	// A labels file overrides the folder labels; limit spreads over the classes.
	os.WriteFile(filepath.Join(dir, "..", "labels.txt"), []byte("# file label\ncat/m.png 7\nz.png,8\ncat/sub/c.JPEG 9\na.jpg\t3\ndog/b.png 4\n"), 0o644)
	d, err = Open(Source{Path: dir, Labels: filepath.Join(dir, "..", "labels.txt"), Limit: 2}, []InputSpec{{Name: "x", Shape: []int64{1, 3, 8, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Labels(), []int64{7, 9}) {
		t.Errorf("labels from file %v, want [7 9]", d.Labels())
	}
}

// TestMatchesTorchvision compares the preprocessing with torchvision's Resize,
// CenterCrop, ToTensor and Normalize run by Debian's Python on the same PNG files.
func TestMatchesTorchvision(t *testing.T) {
	if testing.Short() {
		t.Skip("runs torchvision in Python (~20 s)")
	}
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torchvision, PIL, numpy").Run(); err != nil {
		t.Skipf("%s with torchvision not available: %v", py, err)
	}
	dir := t.TempDir()
	imgs := filepath.Join(dir, "imgs")
	sizes := [][2]int{{37, 29}, {50, 80}, {64, 64}, {31, 200}}
	for i, s := range sizes {
		writeImage(t, filepath.Join(imgs, fmt.Sprintf("%d.png", i)), pattern(i, s[0], s[1]))
	}
	mean, std := []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}
	cases := []struct {
		name         string
		resize, crop int
		tol          float64 // in normalized units; 1/255/0.224 = 0.0175 is one intensity level
	}{
		{"crop only (exact)", 0, 25, 0},
		{"resize and crop", 32, 28, 0.0176},
		{"upscale", 90, 80, 0.0176},
	}
	// One Python run for all cases: importing torch costs seconds.
	script := `
import sys, glob, numpy as np, torch
from PIL import Image
import torchvision.transforms as T
d, out = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(d + "/*.png"))
for i, spec in enumerate(sys.argv[3:]):
    resize, crop = map(int, spec.split(","))
    steps = ([T.Resize(resize)] if resize else []) + [T.CenterCrop(crop), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    tf = T.Compose(steps)
    x = torch.stack([tf(Image.open(f).convert("RGB")) for f in files]).numpy()
    np.save("%s/ref%d.npy" % (out, i), x)
`
	args := []string{"-c", script, imgs, dir}
	for _, c := range cases {
		args = append(args, fmt.Sprintf("%d,%d", c.resize, c.crop))
	}
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("torchvision reference: %v\n%s", err, out)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := filepath.Join(dir, fmt.Sprintf("ref%d.npy", i))
			want, err := npy.ReadFile(ref)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Open(Source{Kind: "images", Path: imgs, BatchSize: len(sizes), Image: ImageOptions{Resize: c.resize, CropSize: c.crop, Mean: mean, Std: std}},
				[]InputSpec{{Name: "x", Shape: []int64{1, 3, int64(c.crop), int64(c.crop)}}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := d.Batch(0)
			if !slices.Equal(b.Inputs[0].Shape, want.Shape) {
				t.Fatalf("shape %v, torchvision %v", b.Inputs[0].Shape, want.Shape)
			}
			got, wf := b.Inputs[0].Data.([]float32), want.Data.([]float32)
			var worst, sum float64
			for i := range got {
				diff := math.Abs(float64(got[i]) - float64(wf[i]))
				worst = math.Max(worst, diff)
				sum += diff
			}
			t.Logf("max |diff| %.5f (%.2f intensity levels), mean %.6f", worst, worst*255*0.224, sum/float64(len(got)))
			if worst > c.tol {
				t.Errorf("max difference from torchvision %.5f > %.5f", worst, c.tol)
			}
		})
	}
}

func TestImageErrors(t *testing.T) {
	root := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(root, name)
		os.MkdirAll(p, 0o755)
		return p
	}
	good := pattern(0, 8, 8)

	empty := mk("empty")
	os.WriteFile(filepath.Join(empty, "readme.txt"), []byte("no images"), 0o644)

	corrupt := mk("corrupt")
	writeImage(t, filepath.Join(corrupt, "a.png"), good)
	os.WriteFile(filepath.Join(corrupt, "b.jpg"), []byte("this is not a jpeg"), 0o644)

	truncated := mk("truncated")
	var buf bytes.Buffer
	png.Encode(&buf, good)
	os.WriteFile(filepath.Join(truncated, "cut.png"), buf.Bytes()[:buf.Len()/2], 0o644)

	// Two bad files: the first in sorted order must be reported, whatever the scheduling.
	twoBad := mk("twobad")
	for i := range 12 {
		writeImage(t, filepath.Join(twoBad, fmt.Sprintf("%02d.png", i)), good)
	}
	os.WriteFile(filepath.Join(twoBad, "05.png"), []byte("\x89PNG\r\n\x1a\ngarbage"), 0o644)
	os.WriteFile(filepath.Join(twoBad, "09.png"), []byte("junk"), 0o644)

	mixed := mk("mixed")
	writeImage(t, filepath.Join(mixed, "top.png"), good)
	writeImage(t, filepath.Join(mixed, "cls", "x.png"), good)

	emptyClass := mk("emptyclass")
	writeImage(t, filepath.Join(emptyClass, "a", "x.png"), good)
	mk("emptyclass/b")

	sizes := mk("sizes")
	writeImage(t, filepath.Join(sizes, "a.png"), good)
	writeImage(t, filepath.Join(sizes, "b.png"), pattern(1, 9, 8))

	ok := mk("ok")
	writeImage(t, filepath.Join(ok, "a.png"), good)
	os.WriteFile(filepath.Join(root, "partial.txt"), []byte("other.png 1\n"), 0o644)
	os.WriteFile(filepath.Join(root, "badline.txt"), []byte("a.png one\n"), 0o644)

	spec := []InputSpec{{Name: "x", Shape: []int64{1, 3, 8, 8}}}
	cases := []struct {
		name  string
		src   Source
		specs []InputSpec
		want  []string
	}{
		{"empty folder", Source{Kind: "images", Path: empty}, spec, []string{empty, "is empty", "1 other files"}},
		{"corrupt jpeg", Source{Path: corrupt}, spec, []string{filepath.Join(corrupt, "b.jpg"), "cannot decode", "corrupt"}},
		{"truncated png", Source{Path: truncated}, spec, []string{filepath.Join(truncated, "cut.png"), "corrupt or truncated"}},
		{"first bad file", Source{Path: twoBad}, spec, []string{filepath.Join(twoBad, "05.png")}},
		{"mixed layout", Source{Path: mixed}, spec, []string{"mixes images (top.png, ...) with subfolders (cls, ...)"}},
		{"empty class", Source{Path: emptyClass}, spec, []string{filepath.Join(emptyClass, "b"), "holds no .jpg"}},
		{"size mismatch", Source{Path: ok}, []InputSpec{{Name: "x", Shape: []int64{1, 3, 224, 224}}},
			[]string{"a.png is 8x8", `expects Nx3x224x224 float32`, "set image.resize and image.crop_size"}},
		{"sizes differ", Source{Path: sizes}, []InputSpec{{Name: "x", Shape: []int64{1, 3, -1, -1}}}, []string{"b.png becomes 9x8", "set image.crop_size"}},
		{"two inputs", Source{Path: ok}, []InputSpec{{Name: "a", Shape: []int64{1, 3, 8, 8}}, {Name: "b", Shape: []int64{1, 3, 8, 8}}}, []string{"one input", "has 2"}},
		{"not 4-d", Source{Path: ok}, []InputSpec{{Name: "x", Shape: []int64{1, 64}}}, []string{"images need a 4-d input"}},
		{"4 channels", Source{Path: ok}, []InputSpec{{Name: "x", Shape: []int64{1, 4, 8, 8}}}, []string{"has 4 channels", "image.layout"}},
		{"int64 input", Source{Path: ok}, []InputSpec{{Name: "x", Shape: []int64{1, 3, 8, 8}, DType: "int64"}}, []string{"float32 or uint8"}},
		{"uint8 with mean", Source{Path: ok, Image: ImageOptions{Mean: []float32{0.5}}}, []InputSpec{{Name: "x", Shape: []int64{1, 3, 8, 8}, DType: "uint8"}}, []string{"remove image.mean"}},
		{"mean length", Source{Path: ok, Image: ImageOptions{Mean: []float32{1, 2}}}, spec, []string{"image.mean has 2 values but the input has 3 channels"}},
		{"zero std", Source{Path: ok, Image: ImageOptions{Std: []float32{1, 0, 1}}}, spec, []string{"image.std", "non-zero"}},
		{"bad layout", Source{Path: ok, Image: ImageOptions{Layout: "CHW"}}, spec, []string{`image.layout "CHW": want NCHW or NHWC`}},
		{"bad color order", Source{Path: ok, Image: ImageOptions{ColorOrder: "RGBA"}}, spec, []string{`image.color_order "RGBA"`}},
		{"labels file misses an image", Source{Path: ok, Labels: filepath.Join(root, "partial.txt")}, spec, []string{"partial.txt has no line for image", "a.png"}},
		{"labels file bad line", Source{Path: ok, Labels: filepath.Join(root, "badline.txt")}, spec, []string{"badline.txt line 1", `label "one"`}},
		{"path is a file", Source{Kind: "images", Path: filepath.Join(ok, "a.png")}, spec, []string{"a.png is a file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 3 { // errors must not depend on goroutine scheduling
				_, err := Open(c.src, c.specs)
				if err == nil {
					t.Fatal("Open succeeded, want an error")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q\n does not contain %q", err, w)
					}
				}
			}
		})
	}
}

func TestImageHelpers(t *testing.T) {
	for _, c := range []struct{ n, c, want int }{
		{5, 4, 0}, // round(0.5) = 0 in Python
		{7, 4, 2}, // round(1.5) = 2
		{6, 4, 1},
		{4, 4, 0},
		{3, 6, -1}, // padded: (6-3)//2 = 1 column of zeros on the left
		{2, 5, -1},
	} {
		if got := cropOrigin(c.n, c.c); got != c.want {
			t.Errorf("cropOrigin(%d, %d) = %d, want %d", c.n, c.c, got, c.want)
		}
	}
	for _, c := range []struct{ w, h, size, ww, wh int }{
		{500, 375, 256, 341, 256}, // int(256*500/375) = 341
		{375, 500, 256, 256, 341},
		{100, 100, 32, 32, 32},
	} {
		r := resizeShorter(image.NewRGBA(image.Rect(0, 0, c.w, c.h)), c.size)
		if r.Bounds().Dx() != c.ww || r.Bounds().Dy() != c.wh {
			t.Errorf("resize %dx%d to %d: %v, want %dx%d", c.w, c.h, c.size, r.Bounds(), c.ww, c.wh)
		}
	}
}
