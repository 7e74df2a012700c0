// Shared-library step: runs `body` as a runreaper run on the current agent.
//
//   @Library('runreaper') _
//   node('linux') {
//     withRunreaper {
//       sh 'make test'        // what it leaks is swept when the block ends
//     }
//   }
//
// Must be called inside node { } (the sh steps run on that agent). Three
// steps make the contract (tests/replicas/jenkins/ replays exactly these):
//   1. sh "'<dir>/register.sh' || true" with returnStdout and
//      RUNREAPER_SWEEP_GRACE set: its stdout holds `RUNREAPER_RUN_ID=<id>`
//      when the block is a run, nothing when it is not;
//   2. the body under withEnv(["RUNREAPER_RUN_ID=<id>"]): every process the
//      block's steps start carries it, and that makes it a member of the run
//      (durable-task launches each sh step detached, so membership cannot be
//      by descent); steps after the block do not carry it;
//   3. in finally, when the block is a run, sh "'<dir>/finish.sh'" with
//      returnStatus, RUNREAPER_JENKINS_RUN=<id> and RUNREAPER_EXIT_CODE (0, or
//      1 when the body threw), outside the body's withEnv.
// Neither step fails the build: the scripts always exit 0 and print
// `runreaper: <why>` when runreaper is unreachable. Options: dir (where the
// scripts are; default the package's /usr/share/runreaper/runners/jenkins),
// grace (RUNREAPER_SWEEP_GRACE, default '10s': the sweep waits that long
// after the block ends). See README.md in deploy/runners/jenkins.
def call(Closure body) {
  call([:], body)
}

def call(Map opts, Closure body) {
  String dir = opts.get('dir', '/usr/share/runreaper/runners/jenkins')
  List<String> extra = ["RUNREAPER_SWEEP_GRACE=${opts.get('grace', '10s')}"]
  String run = ''
  withEnv(extra) {
    run = runIdFrom(sh(script: "'${dir}/register.sh' || true", returnStdout: true,
                       label: 'runreaper register'))
  }
  if (!run) {
    return body()
  }
  int code = 0
  try {
    def result = null
    withEnv(["RUNREAPER_RUN_ID=${run}"]) {
      result = body()
    }
    return result
  } catch (Throwable e) {
    code = 1
    throw e
  } finally {
    withEnv(extra + ["RUNREAPER_JENKINS_RUN=${run}", "RUNREAPER_EXIT_CODE=${code}"]) {
      sh(script: "'${dir}/finish.sh'", returnStatus: true, label: 'runreaper finish')
    }
  }
}

// The id in register.sh's `RUNREAPER_RUN_ID=<id>` line, or '' when none.
@NonCPS
String runIdFrom(String out) {
  for (String line : (out ?: '').readLines()) {
    if (line.startsWith('RUNREAPER_RUN_ID=')) {
      return line.substring('RUNREAPER_RUN_ID='.length()).trim()
    }
  }
  return ''
}
