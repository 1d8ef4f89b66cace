package calib

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // register the decoders image.Decode uses
	_ "image/png"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/image/draw"

	"github.com/torchspeed/torchspeed/pkg/npy"
)

// maxImagePixels refuses images whose header claims more pixels than any photograph
// has, before the decoder allocates them.
const maxImagePixels = 1 << 28

// imageExts are the file extensions taken as images (compared lower-case), as
// torchvision's ImageFolder does for the formats the standard library decodes.
var imageExts = []string{".jpg", ".jpeg", ".png"}

func isImage(name string) bool {
	return slices.Contains(imageExts, strings.ToLower(filepath.Ext(name)))
}

// imageFile is one image of the set.
type imageFile struct {
	path  string
	rel   string // relative to the root, slash-separated
	label int    // class index in an ImageFolder layout, else -1
}

// listImages lists the images under root: the image files in root itself, or, when root
// holds class subdirectories, every image in them (torchvision ImageFolder: classes
// sorted by name, files sorted by directory then name, label = class index).
func listImages(root string) ([]imageFile, []string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, fmt.Errorf("calib: image folder: %w", err)
	}
	var flat []imageFile
	var classes []string
	others := 0
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.IsDir():
			classes = append(classes, e.Name())
		case isImage(e.Name()):
			flat = append(flat, imageFile{path: filepath.Join(root, e.Name()), rel: e.Name(), label: -1})
		default:
			others++
		}
	}
	if len(classes) == 0 {
		if len(flat) == 0 {
			return nil, nil, fmt.Errorf("calib: image folder %s is empty: no .jpg, .jpeg or .png files (%d other files); put the images there, or one subfolder per class", root, others)
		}
		return flat, nil, nil
	}
	if len(flat) > 0 {
		return nil, nil, fmt.Errorf("calib: image folder %s mixes images (%s, ...) with subfolders (%s, ...); keep either the images or one subfolder per class", root, flat[0].rel, classes[0])
	}
	var files []imageFile
	for label, class := range classes { // os.ReadDir sorted them
		type entry struct{ dir, name string }
		var found []entry
		err := filepath.WalkDir(filepath.Join(root, class), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && isImage(d.Name()) {
				found = append(found, entry{filepath.Dir(p), d.Name()})
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("calib: image folder: %w", err)
		}
		if len(found) == 0 {
			return nil, nil, fmt.Errorf("calib: class folder %s holds no .jpg, .jpeg or .png images; remove it (class indices follow the sorted folder names, so every class folder must be there)", filepath.Join(root, class))
		}
		// Python's sorted(os.walk(...)) order, which ImageFolder uses: by directory, then name.
		slices.SortFunc(found, func(a, b entry) int {
			if c := strings.Compare(a.dir, b.dir); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		for _, f := range found {
			p := filepath.Join(f.dir, f.name)
			rel, _ := filepath.Rel(root, p)
			files = append(files, imageFile{path: p, rel: filepath.ToSlash(rel), label: label})
		}
	}
	return files, classes, nil
}

// imagePrep is the preprocessing for one model input.
type imagePrep struct {
	resize, crop int
	mean, std    []float32 // one per output channel
	scale        float32   // 0: divide by 255
	bgr, nhwc    bool
	channels     int
	h, w         int // -1: taken from the first image
	dtype        string
}

func newImagePrep(o ImageOptions, in input) (*imagePrep, error) {
	p := &imagePrep{resize: o.Resize, crop: o.CropSize, scale: o.Scale, dtype: in.dtype,
		bgr: strings.EqualFold(o.ColorOrder, "BGR"), nhwc: strings.EqualFold(o.Layout, "NHWC")}
	layout := "NCHW"
	if p.nhwc {
		layout = "NHWC"
	}
	if len(in.sample) != 3 {
		return nil, fmt.Errorf("calib: %s has shape %s: images need a 4-d input (%s); use .npy data for other inputs", in.label(), in.expect(), layout)
	}
	c, h, w := in.sample[0], in.sample[1], in.sample[2]
	if p.nhwc {
		h, w, c = in.sample[0], in.sample[1], in.sample[2]
	}
	switch c {
	case 1, 3:
		p.channels = int(c)
	case -1:
		p.channels = 3
	default:
		return nil, fmt.Errorf("calib: %s has %d channels (layout %s); images give 1 (grayscale) or 3 (RGB/BGR); check image.layout", in.label(), c, layout)
	}
	p.h, p.w = int(h), int(w)
	switch in.dtype {
	case npy.Float32:
	case npy.Uint8:
		if len(o.Mean) > 0 || len(o.Std) > 0 || o.Scale != 0 {
			return nil, fmt.Errorf("calib: %s is uint8, which takes raw 0..255 pixels; remove image.mean, image.std and image.scale", in.label())
		}
	default:
		return nil, fmt.Errorf("calib: %s has dtype %s; images can feed float32 or uint8 inputs only", in.label(), in.dtype)
	}
	var err error
	if p.mean, err = perChannel("image.mean", o.Mean, p.channels, 0); err != nil {
		return nil, err
	}
	if p.std, err = perChannel("image.std", o.Std, p.channels, 1); err != nil {
		return nil, err
	}
	return p, nil
}

func perChannel(key string, v []float32, channels int, def float32) ([]float32, error) {
	switch len(v) {
	case 0:
		v = []float32{def}
		fallthrough
	case 1:
		out := make([]float32, channels)
		for i := range out {
			out[i] = v[0]
		}
		return out, nil
	case channels:
		return slices.Clone(v), nil
	}
	return nil, fmt.Errorf("calib: %s has %d values but the input has %d channels; give one per channel or one for all", key, len(v), channels)
}

// sampleShape is the per-sample shape for an h x w image.
func (p *imagePrep) sampleShape(h, w int) []int64 {
	if p.nhwc {
		return []int64{int64(h), int64(w), int64(p.channels)}
	}
	return []int64{int64(p.channels), int64(h), int64(w)}
}

// decode reads an image file and returns it as opaque 8-bit RGBA (grayscale replicated
// into R, G and B when the input has one channel).
func (p *imagePrep) decode(path string) (*image.RGBA, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("calib: image %s: cannot decode (%v); the file is corrupt or not a JPEG/PNG; replace or remove it", path, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > maxImagePixels {
		return nil, fmt.Errorf("calib: image %s: %s of %dx%d pixels is not a usable size", path, format, cfg.Width, cfg.Height)
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("calib: image %s: cannot decode %s (%v); the file is corrupt or truncated; replace or remove it", path, format, err)
	}
	return toRGBA(img, p.channels == 1), nil
}

// toRGBA converts any decoded image to opaque RGBA the way PIL's convert("RGB") does:
// alpha is dropped, not composited. With gray set, it converts to luminance as PIL's
// convert("L") does (ITU-R 601-2 weights) and stores it in all three channels.
func toRGBA(img image.Image, gray bool) *image.RGBA {
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	switch src := img.(type) {
	case *image.YCbCr, *image.RGBA:
		// Opaque (JPEG, or PNG without alpha): the draw package has fast paths.
		draw.Draw(out, out.Bounds(), src, b.Min, draw.Src)
	case *image.Gray:
		for y := 0; y < b.Dy(); y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+b.Dx()]
			o := out.Pix[y*out.Stride:]
			for x, v := range row {
				o[4*x], o[4*x+1], o[4*x+2], o[4*x+3] = v, v, v, 255
			}
		}
		return out // already gray
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				i := out.PixOffset(x-b.Min.X, y-b.Min.Y)
				out.Pix[i], out.Pix[i+1], out.Pix[i+2], out.Pix[i+3] = c.R, c.G, c.B, 255
			}
		}
	}
	// Go's decoders return *image.RGBA only for opaque images, but an alpha below 255
	// would make the resampler treat the pixel as premultiplied: force it.
	for i := 3; i < len(out.Pix); i += 4 {
		out.Pix[i] = 255
	}
	if gray {
		for i := 0; i < len(out.Pix); i += 4 {
			r, g, bb := uint32(out.Pix[i]), uint32(out.Pix[i+1]), uint32(out.Pix[i+2])
			l := uint8((r*19595 + g*38470 + bb*7471 + 0x8000) >> 16)
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = l, l, l
		}
	}
	return out
}

// resizeShorter scales img so its shorter side is size, as torchvision's Resize(int)
// does: the longer side becomes int(size * long / short). The kernel is bilinear,
// widened when shrinking (antialiasing), like PIL's resize.
func resizeShorter(img *image.RGBA, size int) *image.RGBA {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	nw, nh := size, size
	if w <= h {
		nh = int(float64(size) * float64(h) / float64(w))
	} else {
		nw = int(float64(size) * float64(w) / float64(h))
	}
	if nw == w && nh == h {
		return img
	}
	dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
	draw.BiLinear.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
	return dst
}

// roundHalfEven rounds like Python's round(), which torchvision's CenterCrop uses.
func roundHalfEven(x float64) int { return int(math.RoundToEven(x)) }

// cropOrigin returns the top-left corner of a centered crop of size c out of n pixels,
// as torchvision's CenterCrop: negative when the image is smaller and gets zero-padded.
func cropOrigin(n, c int) int {
	if c > n {
		return -((c - n) / 2)
	}
	return roundHalfEven(float64(n-c) / 2)
}

// fill writes the center crop of img (already resized), converted to the input's
// channel order, layout, dtype and normalization, into dst, which holds one sample.
func (p *imagePrep) fill(img *image.RGBA, dst any) {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	ow, oh, top, left := w, h, 0, 0
	if p.crop > 0 {
		ow, oh = p.crop, p.crop
		top, left = cropOrigin(h, p.crop), cropOrigin(w, p.crop)
	}
	order := [3]int{0, 1, 2}
	if p.bgr {
		order = [3]int{2, 1, 0}
	}
	C := p.channels
	f32, _ := dst.([]float32)
	u8, _ := dst.([]uint8)
	for y := 0; y < oh; y++ {
		sy := y + top
		for x := 0; x < ow; x++ {
			sx := x + left
			var px [3]uint8 // zero padding outside the image
			if sy >= 0 && sy < h && sx >= 0 && sx < w {
				i := img.PixOffset(sx, sy)
				px = [3]uint8{img.Pix[i], img.Pix[i+1], img.Pix[i+2]}
			}
			for c := 0; c < C; c++ {
				v := px[order[c]]
				var o int
				if p.nhwc {
					o = (y*ow+x)*C + c
				} else {
					o = (c*oh+y)*ow + x
				}
				if u8 != nil {
					u8[o] = v
					continue
				}
				var f float32
				if p.scale == 0 {
					f = float32(v) / 255 // torchvision ToTensor divides in float32
				} else {
					f = float32(v) * p.scale
				}
				f32[o] = (f - p.mean[c]) / p.std[c]
			}
		}
	}
}

// outSize returns the sample size an image of w x h pixels becomes.
func (p *imagePrep) outSize(w, h int) (int, int) {
	if p.resize > 0 {
		if w <= h {
			w, h = p.resize, int(float64(p.resize)*float64(h)/float64(w))
		} else {
			w, h = int(float64(p.resize)*float64(w)/float64(h)), p.resize
		}
	}
	if p.crop > 0 {
		return p.crop, p.crop
	}
	return w, h
}

// loadImages handles Kind "images".
func (ld *loader) loadImages() (*loaded, error) {
	src := ld.src
	if len(ld.ins) != 1 {
		return nil, fmt.Errorf("calib: images can feed a model with one input, but this one has %d (%s); save the inputs as .npz instead", len(ld.ins), inputNames(ld.ins))
	}
	in := ld.ins[0]
	prep, err := newImagePrep(src.Image, in)
	if err != nil {
		return nil, err
	}
	files, classes, labels, err := ld.imageFiles()
	if err != nil {
		return nil, err
	}
	idx := ld.pick(len(files))

	// The first image fixes the sample size when the model leaves it open.
	first, err := prep.decode(files[idx[0]].path)
	if err != nil {
		return nil, err
	}
	ow, oh := prep.outSize(first.Bounds().Dx(), first.Bounds().Dy())
	if (prep.h > 0 && oh != prep.h) || (prep.w > 0 && ow != prep.w) {
		return nil, fmt.Errorf("calib: image %s is %dx%d (WxH) and becomes %dx%d after resize %d and crop_size %d, but %s expects %s; set image.resize and image.crop_size (e.g. 256 and 224)",
			files[idx[0]].path, first.Bounds().Dx(), first.Bounds().Dy(), ow, oh, prep.resize, prep.crop, in.label(), in.expect())
	}
	sample := prep.sampleShape(oh, ow)
	sn := int(numelOf(sample))
	if err := ld.reserve(int64(len(idx))*int64(sn)*int64(npy.ItemSize(in.dtype)), src.Path); err != nil {
		return nil, err
	}
	data := npy.MakeData(in.dtype, len(idx)*sn)
	var (
		mu   sync.Mutex
		done int
	)
	process := func(k int) error {
		f := files[idx[k]]
		img := first
		if k > 0 {
			var err error
			if img, err = prep.decode(f.path); err != nil {
				return err
			}
		}
		if prep.resize > 0 {
			img = resizeShorter(img, prep.resize)
		}
		w, h := img.Bounds().Dx(), img.Bounds().Dy()
		if prep.crop > 0 {
			w, h = prep.crop, prep.crop
		}
		if w != ow || h != oh {
			return fmt.Errorf("calib: image %s becomes %dx%d (WxH) after preprocessing but %s becomes %dx%d; images must end up one size to be batched: set image.crop_size",
				f.path, w, h, files[idx[0]].path, ow, oh)
		}
		prep.fill(img, sliceOf(data, k*sn, (k+1)*sn))
		mu.Lock()
		done++
		ld.progress(done, len(idx))
		mu.Unlock()
		return nil
	}
	if err := firstError(len(idx), process); err != nil {
		return nil, err
	}

	l := &loaded{
		cols:    []*npy.Array{{Shape: append([]int64{int64(len(idx))}, sample...), DType: in.dtype, Data: data}},
		classes: classes,
		names:   make([]string, len(idx)),
	}
	for k, i := range idx {
		l.names[k] = files[i].path
	}
	if labels != nil {
		l.labels = make([]int64, len(idx))
		for k, i := range idx {
			l.labels[k] = labels[i]
		}
	}
	l.desc = fmt.Sprintf("images from %s", src.Path)
	if classes != nil {
		l.desc += fmt.Sprintf(" (ImageFolder, %d classes)", len(classes))
	}
	return l, nil
}

// imageFiles lists the images of the source folder, its classes (ImageFolder layout) and the
// images' labels (from the labels file, or the class folders).
func (ld *loader) imageFiles() (files []imageFile, classes []string, labels []int64, err error) {
	src := ld.src
	st, err := os.Stat(src.Path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("calib: image folder: %w", err)
	}
	if !st.IsDir() {
		return nil, nil, nil, fmt.Errorf("calib: %s is a file; kind images needs a folder of .jpg/.png images (or of class subfolders)", src.Path)
	}
	files, classes, err = listImages(src.Path)
	if err != nil {
		return nil, nil, nil, err
	}
	switch {
	case src.Labels != "":
		if labels, err = readImageLabels(ld.resolvePath(src.Labels), files); err != nil {
			return nil, nil, nil, err
		}
	case classes != nil:
		labels = make([]int64, len(files))
		for i, f := range files {
			labels[i] = int64(f.label)
		}
	}
	return files, classes, labels, nil
}

// firstError runs fn(0) .. fn(n-1) on GOMAXPROCS goroutines and returns the error of the
// lowest position that failed, as a sequential loop would; positions above a failure are
// skipped once it is known.
func firstError(n int, fn func(k int) error) error {
	var (
		next     atomic.Int64
		firstBad atomic.Int64 // lowest failing position; positions above it are skipped
		errs     = make([]error, n)
		wg       sync.WaitGroup
	)
	firstBad.Store(math.MaxInt64)
	workers := min(runtime.GOMAXPROCS(0), n)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= n || int64(k) > firstBad.Load() {
					return
				}
				if err := fn(k); err != nil {
					errs[k] = err
					for {
						cur := firstBad.Load()
						if int64(k) >= cur || firstBad.CompareAndSwap(cur, int64(k)) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if k := firstBad.Load(); k != math.MaxInt64 {
		return errs[k]
	}
	return nil
}
