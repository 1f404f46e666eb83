// Command kube is one binary holding the Kubernetes components the e2e cluster runs
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl), so a
// cold build pays one link instead of six. It picks the component from the name it was
// started under (a symlink) or, failing that, from its first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // time zones for CronJob, as the upstream commands do

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

var components = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func run(name string) {
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
		os.Exit(0)
	case "kubectl":
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		os.Exit(0)
	}
	if ctor, ok := components[name]; ok {
		os.Exit(cli.Run(ctor()))
	}
}

func main() {
	run(filepath.Base(os.Args[0]))
	if len(os.Args) > 1 {
		name := os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
		run(name)
	}
	fmt.Fprintln(os.Stderr, "usage: kube {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl} [args...]\n"+
		"(or start it through a symlink named after the component)")
	os.Exit(2)
}
