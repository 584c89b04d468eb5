//go:build !race

package transition_test

// raceBuild: the tests run under the race detector.
const raceBuild = false
