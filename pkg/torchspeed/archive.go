package torchspeed

import (
	"archive/zip"
	"bytes"
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
	"github.com/torchspeed/torchspeed/internal/exitcode"
)

// MaxManifestBytes bounds the manifest read from an archive: a manifest is a few kilobytes, and
// a 200 MB one once cost 1 GB to parse.
const MaxManifestBytes = 1 << 20

// archiveInfo is what one pass over an archive's records found.
type archiveInfo struct {
	manifest []byte            // extra/torchspeed.json, nil when absent
	digest   string            // see ArchiveDigest
	records  map[string]string // the SHA-256 of each record the digest covers, by name
}

// digestExcluded reports whether a record stays out of the digest: the manifest (which holds
// the digest, and has its own: manifestDigest) and libtorch 2.x's serialization id (random for
// every save, not model content).
func digestExcluded(rec string) bool {
	return rec == "extra/"+ManifestFile || rec == ".data/serialization_id"
}

// scanArchive reads every record of the archive at path once: archive/zip checks each record's
// CRC-32 as it reaches the end (libtorch's reader does not, and 23 of 80 corrupted copies of a
// model loaded and answered differently), the records feed the digests, and the manifest is
// kept. What the records declare is checked first (torch.CheckRecords): nothing is inflated
// past a stated bound.
func scanArchive(path string) (*archiveInfo, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	if err := torch.CheckRecords(zr.File, path); err != nil {
		return nil, exitcode.New(exitcode.Usage, err)
	}
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
	info := &archiveInfo{records: map[string]string{}}
	h := sha256.New()
	for _, r := range recs {
		if r.name == "extra/"+ManifestFile {
			if r.f.UncompressedSize64 > MaxManifestBytes {
				return nil, exitcode.New(exitcode.Usage, fmt.Errorf("load artifact %q: its manifest (%s) is %d bytes, more than the %d a manifest can be: the file was not written by torchspeed or was modified", path, ManifestFile, r.f.UncompressedSize64, MaxManifestBytes))
			}
			b, err := readRecord(r.f, MaxManifestBytes, nil)
			if err != nil {
				return nil, recordError(path, r.name, err)
			}
			info.manifest = b
			continue
		}
		var sink io.Writer
		var own hash.Hash
		if !digestExcluded(r.name) {
			own = sha256.New()
			sink = io.MultiWriter(h, own)
			writeHeader(h, r.name, r.f.UncompressedSize64)
		}
		if _, err := readRecord(r.f, -1, sink); err != nil {
			return nil, recordError(path, r.name, err)
		}
		if own != nil {
			info.records[r.name] = hex.EncodeToString(own.Sum(nil))
		}
	}
	info.digest = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

// manifestDigestKey is how Marshal writes the manifest_sha256 key and the start of its value.
const manifestDigestKey = `"manifest_sha256": "`

// manifestDigest finds the manifest_sha256 value in a manifest's bytes as stored and returns it
// with the SHA-256 of those bytes with the value read as 64 zeros. Any edit, whitespace
// included, changes the digest; a manifest that does not hold the key exactly once, in the form
// Marshal writes, is an error.
func manifestDigest(raw []byte) (value, digest string, err error) {
	key := []byte(manifestDigestKey)
	if n := bytes.Count(raw, key); n != 1 {
		return "", "", fmt.Errorf("it holds %s %d times, where torchspeed writes it once", strings.TrimSuffix(manifestDigestKey, ` "`), n)
	}
	at := bytes.Index(raw, key) + len(key)
	if at+sha256.Size*2 > len(raw) {
		return "", "", errors.New("it ends inside manifest_sha256")
	}
	value = string(raw[at : at+sha256.Size*2])
	c := bytes.Clone(raw)
	copy(c[at:], strings.Repeat("0", sha256.Size*2))
	sum := sha256.Sum256(c)
	return value, hex.EncodeToString(sum[:]), nil
}

// marshalSigned is man.Marshal with man.ManifestSHA256 set to the digest of the bytes returned
// (manifestDigest).
func marshalSigned(man *Manifest) ([]byte, error) {
	man.ManifestSHA256 = strings.Repeat("0", sha256.Size*2)
	raw, err := man.Marshal()
	if err != nil {
		return nil, err
	}
	_, d, err := manifestDigest(raw)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err) // a field's value holds the key: cannot sign it
	}
	at := bytes.Index(raw, []byte(manifestDigestKey)) + len(manifestDigestKey)
	copy(raw[at:], d)
	man.ManifestSHA256 = d
	return raw, nil
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

// VerifyArchive checks an archive before it is loaded: every record's sizes and CRC, and for an
// artifact whose manifest records digests, that the manifest and every other record still match
// them. It returns the parsed manifest, or nil for a plain TorchScript file. A mismatch is bad
// input (exit 2) naming what changed.
func VerifyArchive(path string) (*Manifest, error) {
	info, err := scanArchive(path)
	if err != nil {
		return nil, err
	}
	if info.manifest == nil {
		return nil, nil
	}
	refuse := func(what string) error {
		return exitcode.New(exitcode.Usage, fmt.Errorf("load artifact %q: %s: it was modified after torchspeed wrote it: restore the file or run torchspeed optimize again", path, what))
	}
	// The schema first: a field torchspeed would never write is named as such, digest or not.
	man, err := ParseManifest(info.manifest)
	if err != nil {
		// A hand-made, damaged or tampered manifest is bad input, as a bad config value is.
		return nil, exitcode.New(exitcode.Usage, fmt.Errorf("load artifact %q: %w", path, err))
	}
	if what := modified(man, info); what != "" {
		return nil, refuse(what)
	}
	return man, nil
}

func manifestMismatch(recorded, found string, err error) string {
	if err != nil {
		return fmt.Sprintf("its manifest (extra/%s) was rewritten: %v", ManifestFile, err)
	}
	return fmt.Sprintf("its manifest (extra/%s) does not match its digest (recorded %s, found %s)", ManifestFile, torch.Clip(recorded), found)
}

// modified says what of an archive no longer matches the digests its manifest records, "" when
// everything does (or nothing is recorded).
func modified(man *Manifest, info *archiveInfo) string {
	switch {
	case man.ManifestSHA256 != "":
		// The value parsed must be the one digested (JSON keys match case-insensitively, and the
		// last of two wins).
		if v, d, err := manifestDigest(info.manifest); err != nil || v != d || v != man.ManifestSHA256 {
			return manifestMismatch(man.ManifestSHA256, d, err)
		}
	case man.Format >= 2 && man.RecordsSHA256 != "":
		return fmt.Sprintf("its manifest (extra/%s) records the records' digest but not its own (manifest_sha256)", ManifestFile)
	}
	if man.RecordSHA256 != nil {
		var changed, added, missing []string
		for _, name := range sortedKeys(man.RecordSHA256) {
			if got, ok := info.records[name]; !ok {
				missing = append(missing, torch.Clip(name))
			} else if got != man.RecordSHA256[name] {
				changed = append(changed, torch.Clip(name))
			}
		}
		for _, name := range sortedKeys(info.records) {
			if _, ok := man.RecordSHA256[name]; !ok {
				added = append(added, torch.Clip(name))
			}
		}
		var parts []string
		for _, p := range []struct {
			what  string
			names []string
		}{{"changed", changed}, {"added", added}, {"missing", missing}} {
			if len(p.names) > 0 {
				parts = append(parts, p.what+" "+listSome(p.names, 5))
			}
		}
		if len(parts) > 0 {
			return "its records do not match the digests in its manifest: " + strings.Join(parts, "; ")
		}
	}
	if man.RecordsSHA256 != "" && man.RecordsSHA256 != info.digest {
		return fmt.Sprintf("its records do not match the digest in its manifest (recorded %s, found %s)", torch.Clip(man.RecordsSHA256), info.digest)
	}
	return ""
}

// listSome joins up to n names, saying how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// SaveArtifact saves mod to path with man as its manifest, and records in man the digests of
// the saved records (ArchiveDigest, and one per record) and of the manifest itself, which Load
// verifies. The archive is written twice: the digests cover the records, which exist only once
// saved.
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
	man.RecordsSHA256, man.RecordSHA256, man.ManifestSHA256 = "", nil, ""
	for pass := 0; pass < 2; pass++ {
		raw, err := man.Marshal()
		if pass == 1 {
			raw, err = marshalSigned(man)
		}
		if err != nil {
			return fmt.Errorf("save artifact %q: %w", path, err)
		}
		if len(raw) > MaxManifestBytes {
			return fmt.Errorf("save artifact %q: the manifest is %d bytes, more than the %d Load accepts", path, len(raw), MaxManifestBytes)
		}
		if err := mod.Save(path, map[string][]byte{ManifestFile: raw}); err != nil {
			return err
		}
		info, err := scanArchive(path)
		if err != nil {
			return fmt.Errorf("save artifact %q: reading it back: %w", path, err)
		}
		if pass == 1 && info.digest != man.RecordsSHA256 {
			return fmt.Errorf("save artifact %q: libtorch wrote different records for the same module twice (digest %s, then %s): cannot record a digest", path, man.RecordsSHA256, info.digest)
		}
		man.RecordsSHA256 = info.digest
		if len(info.records) <= MaxManifestList {
			man.RecordSHA256 = info.records
		}
	}
	return nil
}
