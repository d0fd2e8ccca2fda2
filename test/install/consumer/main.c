/* Trains an artifact for N steps through the installed C API, every train_step input
 * zero but lr = 0.1, and prints the last loss: `consumer MODEL.ortc N`. */
#include <ortc/runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void) {
  fprintf(stderr, "consumer: %s\n", ortc_last_error());
  return 1;
}

int main(int argc, char **argv) {
  ortc_artifact *artifact = NULL;
  ortc_session *session = NULL;
  float loss = 0;
  int64_t i, n;
  int step, steps = argc > 2 ? atoi(argv[2]) : 1;
  if (argc < 2)
    return 2;
  if (ortc_artifact_load(argv[1], &artifact) || ortc_session_create(artifact, &session))
    return fail();
  n = ortc_function_input_count(session, "train_step");
  for (i = 0; i < n; ++i) {
    const char *name = ortc_function_input(session, "train_step", i);
    size_t bytes = ortc_tensor_bytes(session, ortc_tensor_find(session, name));
    void *zeros = calloc(1, bytes);
    if (strcmp(name, "lr") == 0) {
      float lr = 0.1f;
      memcpy(zeros, &lr, sizeof lr);
    }
    if (ortc_bind_input(session, name, zeros, bytes))
      return fail();
    free(zeros);
  }
  for (step = 0; step < steps; ++step)
    if (ortc_run(session, "train_step") || ortc_read_output(session, "loss", &loss, sizeof loss))
      return fail();
  printf("%.9g\n", loss);
  ortc_session_free(session);
  ortc_artifact_free(artifact);
  return 0;
}
