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
// /usr/share/runreaper/runners/jenkins), grace (RUNREAPER_SWEEP_GRACE, e.g.
// '10s'). See README.md in deploy/runners/jenkins.
def call(Closure body) {
  call([:], body)
}

def call(Map opts, Closure body) {
  String dir = opts.get('dir', '/usr/share/runreaper/runners/jenkins')
  List<String> extra = opts.grace ? ["RUNREAPER_SWEEP_GRACE=${opts.grace}"] : []
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
    withEnv(extra + ["RUNREAPER_EXIT_CODE=${code}"]) {
      sh(script: "'${dir}/finish.sh'", returnStatus: true, label: 'runreaper finish')
    }
  }
}
