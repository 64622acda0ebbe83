import Foundation
import SignetTestSupport

/// The built `signet` binary: beside the test bundle in the build directory, or $SIGNET_BINARY.
enum CLI {
    static let binary: String = {
        if let override = ProcessInfo.processInfo.environment["SIGNET_BINARY"] { return override }
        let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = testBundle.deletingLastPathComponent()
        // Under `swift test` the runner is <build>/<Product>PackageTests.xctest; go up until signet is beside us.
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("signet").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        fatalError("cannot find the signet binary near \(testBundle.path); set SIGNET_BINARY")
    }()

    @discardableResult
    static func run(_ arguments: [String], environment: [String: String?] = [:], directory: String? = nil) throws -> ProcessResult {
        try SignetTestSupport.run(binary, arguments, environment: environment, directory: directory)
    }

    /// Runs signet and returns its peak RSS in KiB (ru_maxrss of RUSAGE_CHILDREN, read by python3).
    /// `status` is the exit status signet must end with (0 unless a refusal is measured).
    static func peakRSS(_ arguments: [String], status: Int32 = 0) throws -> Int {
        let measure =
            "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
        let result = try SignetTestSupport.run("python3", ["-c", measure, binary] + arguments)
        guard result.status == status, let kib = Int(result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw SupportError("signet \(arguments) failed: \(result.status) \(result.stderr)")
        }
        return kib
    }

    /// Whether this test process (and so the signet it built) runs under AddressSanitizer, whose
    /// redzones and quarantine make memory use grow with every allocation.
    static let underAddressSanitizer: Bool = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__asan_init") != nil
}

/// A key set made by `signet keygen` in a fresh directory (from the process's ``KeyPool``), plus
/// what the openssl CLI makes for the cases signet must refuse.
final class Workspace {
    let directory: TemporaryDirectory
    var path: String { directory.path }
    let passphrase = "correct horse battery staple"
    var passFile: String { directory.file("pass.txt") }
    var keys: String { directory.file("keys") }
    var privatePEM: String { keys + "/private_key.pem" }
    var privateP12: String { keys + "/private_key.p12" }
    var publicDER: String { keys + "/public_key.der" }
    var certificate: String { keys + "/certificate.der" }
    let keyID: String

    /// The keys are `signet keygen`'s, made once per process (``KeyPool``): each Workspace of a
    /// test has a key of its own.
    init() throws {
        directory = try TemporaryDirectory()
        try directory.write("pass.txt", Data((passphrase + "\n").utf8), mode: 0o600)
        keyID = try KeyPool.copy("workspace", slot: KeyPool.nextSlot(), to: directory.file("keys"), passphraseFile: directory.file("pass.txt"))
    }

    /// Runs openssl in the workspace and fails loudly if it fails.
    @discardableResult
    func openssl(_ arguments: [String], environment: [String: String?] = [:]) throws -> ProcessResult {
        let result = try SignetTestSupport.run("openssl", arguments, environment: environment, directory: path)
        guard result.status == 0 else { throw SupportError("openssl \(arguments) failed: \(result.stderr)") }
        return result
    }

    /// Makes a key pair with `openssl genpkey OPTIONS` (private PEM, mode 0600) and returns the
    /// paths of the private key and of its DER SubjectPublicKeyInfo.
    func opensslKeyPair(_ name: String, _ options: [String]) throws -> (privateKey: String, publicDER: String) {
        try openssl(["genpkey"] + options + ["-out", name + ".pem"])
        try openssl(["pkey", "-in", name + ".pem", "-pubout", "-outform", "DER", "-out", name + ".der"])
        chmod(directory.file(name + ".pem"), 0o600)
        return (directory.file(name + ".pem"), directory.file(name + ".der"))
    }

    /// A PEM SubjectPublicKeyInfo of the signet key, for `openssl dgst -verify`.
    func publicPEM() throws -> String {
        let out = directory.file("public.pem")
        try openssl(["pkey", "-pubin", "-inform", "DER", "-in", publicDER, "-out", out])
        return out
    }
}

/// Python that starts the program in argv[1:] on a new pseudo-terminal (as a shell would: signal
/// mask cleared, SIGINT default) and reads its output into `out` until the passphrase prompt.
/// The test appends what to do at the prompt; `fd` is the terminal, `pid` the child.
let ptyPrelude = pythonScript("pty_prelude.py")

/// ``ptyPrelude`` that then types stdin at the prompt, collects everything the terminal shows
/// until the program ends, prints it on stdout and exits with the program's status.
let ptyAnswer =
    ptyPrelude + """
        os.write(fd, sys.stdin.buffer.read())
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk: break
            out += chunk
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(out)
        sys.exit(os.waitstatus_to_exitcode(status))
        """

/// Python that runs the program in argv[1:] on a new pseudo-terminal (its stdin, stdout and
/// stderr), prints everything the terminal showed on stdout, the seconds it ran on stderr, and
/// exits with the program's status.
let ptyRun = pythonScript("pty_run.py")
