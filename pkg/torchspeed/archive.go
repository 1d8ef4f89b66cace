package torchspeed

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"

	"github.com/torchspeed/torchspeed/bindings/torch"
	"github.com/torchspeed/torchspeed/pkg/tserr"
)

// MaxManifestBytes bounds the manifest read from an archive: a manifest is a few kilobytes, and
// a 200 MB one once cost 1 GB to parse.
const MaxManifestBytes = 1 << 20

// archiveInfo is what one pass over an archive's records found.
type archiveInfo struct {
	manifest []byte // extra/torchspeed.json, nil when absent
	digest   string // see ArchiveDigest
}

// digestExcluded reports whether a record stays out of the digest: the manifest (which holds
// the digest) and libtorch 2.x's serialization id (random for every save, not model content).
func digestExcluded(rec string) bool {
	return rec == "extra/"+ManifestFile || rec == ".data/serialization_id"
}

// scanArchive reads every record of the archive at path once: archive/zip checks each record's
// CRC-32 as it reaches the end (libtorch's reader does not, and 23 of 80 corrupted copies of a
// model loaded and answered differently), the records feed the digest, and the manifest is kept.
func scanArchive(path string) (*archiveInfo, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	type rec struct {
		name string
		f    *zip.File
	}
	var recs []rec
	for _, f := range zr.File {
		_, name, ok := strings.Cut(f.Name, "/") // records live under one folder named for the archive
		if !ok || strings.HasSuffix(f.Name, "/") {
			continue
		}
		recs = append(recs, rec{name, f})
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].name < recs[j].name })
	info := &archiveInfo{}
	h := sha256.New()
	for _, r := range recs {
		if r.name == "extra/"+ManifestFile {
			if r.f.UncompressedSize64 > MaxManifestBytes {
				return nil, fmt.Errorf("load artifact %q: its manifest (%s) is %d bytes, more than the %d a manifest can be: the file was not written by torchspeed or was modified", path, ManifestFile, r.f.UncompressedSize64, MaxManifestBytes)
			}
			b, err := readRecord(r.f, MaxManifestBytes, nil)
			if err != nil {
				return nil, recordError(path, r.name, err)
			}
			info.manifest = b
			continue
		}
		var sink hash.Hash
		if !digestExcluded(r.name) {
			sink = h
			writeHeader(h, r.name, r.f.UncompressedSize64)
		}
		if _, err := readRecord(r.f, -1, sink); err != nil {
			return nil, recordError(path, r.name, err)
		}
	}
	info.digest = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

// writeHeader frames one record in the digest: its name and length, so that moving bytes
// between records changes the digest.
func writeHeader(h hash.Hash, name string, size uint64) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	h.Write([]byte(name))
	binary.LittleEndian.PutUint64(n[:], size)
	h.Write(n[:])
}

// readRecord reads one record to its end (which is where archive/zip checks the CRC), into
// sink when given, and returns its bytes when limit >= 0.
func readRecord(f *zip.File, limit int64, sink io.Writer) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if limit >= 0 {
		return io.ReadAll(io.LimitReader(rc, limit+1))
	}
	if sink == nil {
		sink = io.Discard
	}
	_, err = io.Copy(sink, rc)
	return nil, err
}

func recordError(path, rec string, err error) error {
	if errors.Is(err, zip.ErrChecksum) {
		return fmt.Errorf("load model %q: record %s is damaged (its checksum does not match): the file was corrupted on disk or in transit: copy or export it again", path, rec)
	}
	return fmt.Errorf("load model %q: cannot read record %s: %w: copy or export it again", path, rec, err)
}

// ArchiveDigest is the SHA-256 of an archive's records, all but the manifest (and libtorch
// 2.x's random serialization id), taken in name order, each framed by its name and length, over
// the uncompressed bytes. It is what a manifest's records_sha256 holds. It also checks every
// record's CRC.
func ArchiveDigest(path string) (string, error) {
	info, err := scanArchive(path)
	if err != nil {
		return "", err
	}
	return info.digest, nil
}

// VerifyArchive checks an archive before it is loaded: every record's CRC, and for an artifact
// whose manifest records a digest, that the records still match it. It returns the parsed
// manifest, or nil for a plain TorchScript file.
func VerifyArchive(path string) (*Manifest, error) {
	info, err := scanArchive(path)
	if err != nil {
		return nil, err
	}
	if info.manifest == nil {
		return nil, nil
	}
	man, err := ParseManifest(info.manifest)
	var bad *ManifestError
	if errors.As(err, &bad) {
		// A hand-made or tampered manifest is bad input, as a bad config value is.
		return nil, tserr.BadInput(fmt.Errorf("load artifact %q: %w", path, err))
	} else if err != nil {
		return nil, fmt.Errorf("load artifact %q: %w", path, err)
	}
	if man.RecordsSHA256 != "" && man.RecordsSHA256 != info.digest {
		return nil, fmt.Errorf("load artifact %q: its records do not match the digest in its manifest (recorded %s, found %s): it was modified after torchspeed wrote it: run torchspeed optimize again or restore the file",
			path, torch.Clip(man.RecordsSHA256), info.digest)
	}
	return man, nil
}

// SaveArtifact saves mod to path with man as its manifest, and records in man the digest of
// the saved records (ArchiveDigest), which Load verifies. The archive is written twice: the
// digest covers the records, which exist only once saved.
func SaveArtifact(mod *torch.Module, path string, man *Manifest) error {
	if mod == nil || man == nil {
		return fmt.Errorf("save artifact %q: no module or no manifest given", path)
	}
	// An artifact must load in stock PyTorch: PassFastQDQ's, PassFastLinear's, PassFastConv's and
	// PassFuseConvAdd's operators exist only in the shim.
	counts, err := mod.NodeCounts()
	if err != nil {
		return fmt.Errorf("save artifact %q: %w", path, err)
	}
	for kind := range counts {
		if strings.HasPrefix(kind, "torchspeed::") {
			return fmt.Errorf("save artifact %q: the module calls %s, which stock PyTorch cannot load: save it before %s, %s, %s or %s and list that pass in the manifest's load passes", path, kind, PassFastQDQ, PassFastLinear, PassFastConv, PassFuseConvAdd)
		}
	}
	man.RecordsSHA256 = ""
	for pass := 0; pass < 2; pass++ {
		raw, err := man.Marshal()
		if err != nil {
			return fmt.Errorf("save artifact %q: %w", path, err)
		}
		if len(raw) > MaxManifestBytes {
			return fmt.Errorf("save artifact %q: the manifest is %d bytes, more than the %d Load accepts", path, len(raw), MaxManifestBytes)
		}
		if err := mod.Save(path, map[string][]byte{ManifestFile: raw}); err != nil {
			return err
		}
		d, err := ArchiveDigest(path)
		if err != nil {
			return fmt.Errorf("save artifact %q: reading it back: %w", path, err)
		}
		if pass == 1 && d != man.RecordsSHA256 {
			return fmt.Errorf("save artifact %q: libtorch wrote different records for the same module twice (digest %s, then %s): cannot record a digest", path, man.RecordsSHA256, d)
		}
		man.RecordsSHA256 = d
	}
	return nil
}
