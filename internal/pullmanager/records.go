package pullmanager

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const (
	cacheFilesSHA256Prefix = "sha256-"
	tmpFilesSuffix         = ".tmp"
)

// records reads and writes the kubelet's pull records in a directory (the
// kubelet's fsPullRecordsAccessor): pulling/sha256-<hash of image> holds an
// ImagePullIntent, pulled/sha256-<hash of imageRef> an ImagePulledRecord,
// both kubelet.config.k8s.io/v1beta1 JSON.
type records struct {
	pullingDir string
	pulledDir  string
}

func newRecords(dir string) (*records, error) {
	r := &records{pullingDir: filepath.Join(dir, "pulling"), pulledDir: filepath.Join(dir, "pulled")}
	for _, d := range []string{r.pullingDir, r.pulledDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// cacheFilename is the kubelet's: sha256-<hex SHA-256 of the name>.
func cacheFilename(name string) string {
	return fmt.Sprintf("%s%x", cacheFilesSHA256Prefix, sha256.Sum256([]byte(name)))
}

func (r *records) writeIntent(image string) error {
	intent := kubeletv1beta1.ImagePullIntent{Image: image}
	intent.APIVersion, intent.Kind = kubeletv1beta1.SchemeGroupVersion.String(), "ImagePullIntent"
	b, err := json.Marshal(&intent)
	if err != nil {
		return err
	}
	return writeFile(r.pullingDir, cacheFilename(image), b)
}

func (r *records) intentExists(image string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(r.pullingDir, cacheFilename(image)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var intent kubeletv1beta1.ImagePullIntent
	if err := json.Unmarshal(b, &intent); err != nil {
		return false, nil // not valid: as if absent, as the kubelet
	}
	return intent.Image == image, nil
}

func (r *records) deleteIntent(image string) error {
	err := os.Remove(filepath.Join(r.pullingDir, cacheFilename(image)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (r *records) listIntents() ([]kubeletv1beta1.ImagePullIntent, error) {
	var out []kubeletv1beta1.ImagePullIntent
	err := processDirFiles(r.pullingDir, func(path string, b []byte) error {
		var intent kubeletv1beta1.ImagePullIntent
		if err := json.Unmarshal(b, &intent); err != nil {
			return fmt.Errorf("failed to decode ImagePullIntent from file %q: %w", path, err)
		}
		out = append(out, intent)
		return nil
	})
	return out, err
}

// getPulled returns the record of imageRef; a file that does not decode
// is exists=true with the error, as the kubelet's GetImagePulledRecord.
func (r *records) getPulled(imageRef string) (*kubeletv1beta1.ImagePulledRecord, bool, error) {
	b, err := os.ReadFile(filepath.Join(r.pulledDir, cacheFilename(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, true, fmt.Errorf("failed to decode ImagePulledRecord of %q: %w", imageRef, err)
	}
	if rec.ImageRef != imageRef {
		return nil, true, fmt.Errorf("ImagePulledRecord of %q names %q", imageRef, rec.ImageRef)
	}
	return &rec, true, nil
}

func (r *records) writePulled(rec *kubeletv1beta1.ImagePulledRecord) error {
	rec.APIVersion, rec.Kind = kubeletv1beta1.SchemeGroupVersion.String(), "ImagePulledRecord"
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeFile(r.pulledDir, cacheFilename(rec.ImageRef), b)
}

// listPulled reads every pulled record; one that does not decode is
// skipped with its error in the result, as the kubelet's
// ListImagePulledRecords.
func (r *records) listPulled() ([]*kubeletv1beta1.ImagePulledRecord, error) {
	var out []*kubeletv1beta1.ImagePulledRecord
	err := processDirFiles(r.pulledDir, func(path string, b []byte) error {
		var rec kubeletv1beta1.ImagePulledRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("failed to decode ImagePulledRecord from file %q: %w", path, err)
		}
		out = append(out, &rec)
		return nil
	})
	return out, err
}

func (r *records) deletePulled(imageRef string) error {
	err := os.Remove(filepath.Join(r.pulledDir, cacheFilename(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// writeFile is the kubelet's: a temporary file renamed into place.
func writeFile(dir, name string, content []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create directory %q: %w", dir, err)
	}
	target := filepath.Join(dir, name)
	tmp := target + tmpFilesSuffix
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("failed to create temporary file %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// processDirFiles runs action on each record file of dir (not the
// temporary ones), collecting the errors.
func processDirFiles(dir string, action func(path string, content []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, cacheFilesSHA256Prefix) || strings.HasSuffix(n, tmpFilesSuffix) {
			continue
		}
		p := filepath.Join(dir, n)
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read %q: %w", p, err))
			continue
		}
		if err := action(p, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
