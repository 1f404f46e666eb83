// jsonpatch-check applies each webhook fixture's expected JSON Patch to the pod of its
// AdmissionReview with gopkg.in/evanphx/json-patch.v4, the implementation kube-apiserver uses
// for mutating webhook responses, and compares the result with the fixture's expected pod.
//
// Usage: jsonpatch-check CASES_DIR
// Every CASES_DIR/<case>/patch.json must come with request.json and pod.json. Exits 1 when a
// patch does not apply or the result differs, 2 on usage errors.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

type review struct {
	Request struct {
		Object json.RawMessage `json:"object"`
	} `json:"request"`
}

func check(dir string) error {
	reqBytes, err := os.ReadFile(filepath.Join(dir, "request.json"))
	if err != nil {
		return err
	}
	var r review
	if err := json.Unmarshal(reqBytes, &r); err != nil {
		return fmt.Errorf("request.json: %v", err)
	}
	patchBytes, err := os.ReadFile(filepath.Join(dir, "patch.json"))
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DecodePatch(patchBytes)
	if err != nil {
		return fmt.Errorf("patch.json does not decode: %v", err)
	}
	patched, err := patch.Apply(r.Request.Object)
	if err != nil {
		return fmt.Errorf("patch does not apply: %v", err)
	}
	wantBytes, err := os.ReadFile(filepath.Join(dir, "pod.json"))
	if err != nil {
		return err
	}
	var got, want interface{}
	if err := json.Unmarshal(patched, &got); err != nil {
		return fmt.Errorf("patched pod: %v", err)
	}
	if err := json.Unmarshal(wantBytes, &want); err != nil {
		return fmt.Errorf("pod.json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("patched pod differs from pod.json:\n got  %s\n want %s", patched, wantBytes)
	}
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: jsonpatch-check CASES_DIR")
		os.Exit(2)
	}
	matches, err := filepath.Glob(filepath.Join(os.Args[1], "*", "patch.json"))
	if err != nil || len(matches) == 0 {
		fmt.Fprintf(os.Stderr, "jsonpatch-check: no */patch.json under %s\n", os.Args[1])
		os.Exit(2)
	}
	sort.Strings(matches)
	failed := 0
	for _, m := range matches {
		dir := filepath.Dir(m)
		if err := check(dir); err != nil {
			fmt.Printf("FAIL %s: %v\n", filepath.Base(dir), err)
			failed++
		} else {
			fmt.Printf("ok   %s\n", filepath.Base(dir))
		}
	}
	fmt.Printf("%d patches applied, %d failed\n", len(matches), failed)
	if failed > 0 {
		os.Exit(1)
	}
}
