// Shared-library step: runs `body` as a runreaper run on the current agent.
//
//   @Library('runreaper') _
//   node('linux') {
//     withRunreaper {
//       sh 'make test'        // what it leaks is swept when the block ends
//     }
//   }
//
// Must be called inside node { } (the sh steps run on that agent). The
// register and finish steps never fail the build (returnStatus: true; the
// scripts always exit 0 and print `runreaper: <why>` when runreaper is
// unreachable). Options: dir (where the scripts are; default the package's
// /usr/share/runreaper/runners/jenkins), grace (RUNREAPER_SWEEP_GRACE, default
// '10s': the sweep waits that long after the block ends). See README.md in deploy/runners/jenkins.
def call(Closure body) {
  call([:], body)
}

def call(Map opts, Closure body) {
  String dir = opts.get('dir', '/usr/share/runreaper/runners/jenkins')
  List<String> extra = ["RUNREAPER_SWEEP_GRACE=${opts.get('grace', '10s')}"]
  withEnv(extra) {
    sh(script: "'${dir}/register.sh'", returnStatus: true, label: 'runreaper register')
  }
  int code = 0
  try {
    return body()
  } catch (Throwable e) {
    code = 1
    throw e
  } finally {
    // The finish step must not carry the run's cookie: the sweep that follows
    // would take its own sh wrapper. The run is named by RUNREAPER_NODE_COOKIE.
    withEnv(extra + ["RUNREAPER_EXIT_CODE=${code}",
                     "RUNREAPER_NODE_COOKIE=${env.JENKINS_NODE_COOKIE ?: ''}",
                     'JENKINS_NODE_COOKIE=runreaper-finish']) {
      sh(script: "'${dir}/finish.sh'", returnStatus: true, label: 'runreaper finish')
    }
  }
}
