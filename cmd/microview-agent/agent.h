/* microview-agent internals shared by the entry point and the Kubernetes mode. */
#ifndef MV_AGENT_MAIN_H
#define MV_AGENT_MAIN_H

/* Runs the agent in Kubernetes mode (device plugin); returns the exit code. */
int agent_k8s_main(int argc, char **argv);

#endif
