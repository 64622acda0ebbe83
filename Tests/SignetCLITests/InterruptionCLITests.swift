import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Interruptions, concurrent updates and reading during updates: DIR is always the whole old
/// tree or the whole new one, and nothing Signet made survives the next run.
@Suite("Interruptions, concurrent unpacks, reverify during updates", .serialized)
struct InterruptionCLITests {
    /// Starts signet, sends `signal` after `delay` seconds (signals reset to default in the
    /// child, as a shell does), and returns its exit status (negative: killed by that signal).
    static let killer = pythonScript("interruption_killer.py")

    /// Runs several signet command lines at once (separated by "--") and prints their statuses.
    static let together = pythonScript("interruption_together.py")

    struct Setup {
        let work: Workspace
        let packages: [Int: String]
        var app: String { work.directory.file("install/app") }
        var parent: String { work.directory.file("install") }
    }

    /// Packages of one name at sequences 1...3, each big enough that unpack takes a moment.
    static func setup(files: Int = 120, size: Int = 96 << 10) throws -> Setup {
        let work = try Workspace()
        var packages: [Int: String] = [:]
        for sequence in 1...3 {
            let source = work.directory.file("v\(sequence)")
            try FileManager.default.createDirectory(atPath: source + "/data", withIntermediateDirectories: true)
            for index in 0..<files {
                _ = try work.directory.writeRandom("v\(sequence)/data/f\(index).bin", count: size)
            }
            try work.directory.write("v\(sequence)/version.txt", Data("\(sequence)\n".utf8))
            let out = work.directory.file("app-\(sequence).zip")
            let made = try CLI.run([
                "pack", source, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
                "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out
            ])
            #expect(made.status == 0, "\(made.stderr)")
            packages[sequence] = out
        }
        try FileManager.default.createDirectory(atPath: work.directory.file("install"), withIntermediateDirectories: true)
        return Setup(work: work, packages: packages)
    }

    static func unpack(_ setup: Setup, _ sequence: Int, extra: [String] = []) -> [String] {
        [CLI.binary, "unpack", setup.packages[sequence]!, "--dest", setup.app, "--pubkey", setup.work.publicDER, "--allow-downgrade"] + extra
    }

    /// Signet's own leftovers beside `name` in `directory` (the documented lock file excepted).
    static func leftovers(_ directory: String, _ name: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix(".\(name).signet-") && !isKeptBesideDestination($0) }
    }

    /// The installed sequence, after checking that the tree verifies as a whole.
    static func installedSequence(_ setup: Setup) throws -> Int? {
        guard FileManager.default.fileExists(atPath: setup.app) else { return nil }
        let check = try CLI.run(["reverify", setup.app, "--pubkey", setup.work.publicDER])
        #expect(check.status == 0, "DIR must be one whole tree: \(check.stdoutText)")
        return Int(String(decoding: try contents(setup.app + "/version.txt"), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test("unpack killed by SIGINT, SIGTERM or SIGKILL at several points: DIR is old or new, no staging survives the next run")
    func killUnpack() throws {
        let setup = try Self.setup()
        #expect(try run(CLI.binary, Array(Self.unpack(setup, 1).dropFirst())).status == 0)
        var next = 2
        for signal in [SIGINT, SIGTERM, SIGKILL] {
            for delay in [0.02, 0.12, 0.3, 0.6] {
                let before = try Self.installedSequence(setup)
                let status = try run("python3", ["-c", Self.killer, String(delay), String(signal)] + Self.unpack(setup, next)).stdoutText
                let after = try Self.installedSequence(setup)
                #expect(
                    after == before || after == next,
                    "signal \(signal) after \(delay) s (exit \(status)): \(String(describing: before)) -> \(String(describing: after))")
                if signal != SIGKILL {
                    let left = try Self.leftovers(setup.parent, "app")
                    #expect(left.isEmpty, "signal \(signal) after \(delay) s left \(left)")
                    if status.hasPrefix("-") { #expect(status.trimmingCharacters(in: .whitespacesAndNewlines) == "-\(signal)", "it dies of the signal") }
                }
                // The next run removes whatever a killed one left.
                next = next == 2 ? 1 : 2
                #expect(try run(CLI.binary, Array(Self.unpack(setup, next).dropFirst())).status == 0)
                let remaining = try Self.leftovers(setup.parent, "app")
                #expect(remaining.isEmpty, "after the next unpack: \(remaining)")
                #expect(try Self.installedSequence(setup) == next)
                next = next == 2 ? 1 : 2
            }
        }
    }

    @Test(
        "unpack killed with SIGKILL at exact steps (staging, the durability step, the swap, after it): DIR is the old tree before the swap and the new one after; the next run cleans up"
    )
    func killAtSteps() throws {
        let setup = try Self.setup(files: 40, size: 8 << 10)
        #expect(try run(CLI.binary, Array(Self.unpack(setup, 1).dropFirst())).status == 0)
        // strace delivers SIGKILL when the process enters the named system call (with `error=`,
        // the call is not made at all): the real binary, killed at a known step, no test hooks.
        let steps: [(inject: String, expected: String)] = [
            ("openat:signal=SIGKILL:when=60", "old"), // while files are being staged
            ("syncfs:signal=SIGKILL:error=EINTR", "old"), // staged, before the durability step
            ("syncfs:signal=SIGKILL", "old"), // in it
            ("renameat2:signal=SIGKILL:error=EINTR", "old"), // durable, before the swap
            ("fsync:signal=SIGKILL", "new"), // swapped, before the directory is flushed
            ("unlinkat:signal=SIGKILL:when=3", "new") // while the old tree is removed
        ]
        var installed = 1
        for step in steps {
            let next = installed == 1 ? 2 : 1
            let call = String(step.inject.prefix { $0 != ":" })
            // strace dies of the signal its tracee died of: report it rather than die with it.
            let killed = try run(
                "bash",
                [
                    "-c", "strace \"$@\"; echo $?", "strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + call,
                    "-e", "inject=" + step.inject
                ] + Self.unpack(setup, next))
            #expect(killed.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "137", "\(step.inject): killed by SIGKILL (128 + 9)")
            let after = try Self.installedSequence(setup)
            #expect(
                after == (step.expected == "old" ? installed : next),
                "\(step.inject): DIR holds sequence \(String(describing: after)), expected the \(step.expected) tree")
            installed = after ?? installed
            // The next run succeeds and leaves nothing of the killed one behind.
            let again = installed == 1 ? 2 : 1
            let rerun = try run(CLI.binary, Array(Self.unpack(setup, again).dropFirst()))
            #expect(rerun.status == 0, "\(step.inject): \(rerun.stderr)")
            let left = try Self.leftovers(setup.parent, "app")
            #expect(left.isEmpty, "\(step.inject): \(left)")
            #expect(try Self.installedSequence(setup) == again)
            installed = again
        }
    }

    @Test("pack killed by SIGINT, SIGTERM or SIGKILL: no package or a whole one, no temporary file survives the next run")
    func killPack() throws {
        let setup = try Self.setup(files: 120, size: 64 << 10)
        let out = setup.work.directory.file("out/pkg.zip")
        try FileManager.default.createDirectory(atPath: setup.work.directory.file("out"), withIntermediateDirectories: true)
        let pack = [
            CLI.binary, "pack", setup.work.directory.file("v1"), "--key", setup.work.privatePEM, "--passphrase-file", setup.work.passFile,
            "--name", "app", "--version", "1", "--sequence", "1", "--compression-level", "9", "--out", out
        ]
        for signal in [SIGINT, SIGTERM, SIGKILL] {
            for delay in [0.05, 0.4] {
                let status = try run("python3", ["-c", Self.killer, String(delay), String(signal)] + pack).stdoutText
                if FileManager.default.fileExists(atPath: out) {
                    #expect(try CLI.run(["inspect", out, "--pubkey", setup.work.publicDER]).status == 0, "a package is whole or absent")
                }
                if signal != SIGKILL {
                    let left = try Self.leftovers(setup.work.directory.file("out"), "pkg.zip")
                    #expect(left.isEmpty, "signal \(signal) after \(delay) s (exit \(status)) left \(left)")
                }
                #expect(try run(CLI.binary, Array(pack.dropFirst()) + ["--force"]).status == 0)
                #expect(try Self.leftovers(setup.work.directory.file("out"), "pkg.zip").isEmpty, "after the next pack")
                try FileManager.default.removeItem(atPath: out)
            }
        }
    }

    @Test("two unpacks of different sequences into one DIR, many times: it never ends at the lower one")
    func concurrentUnpacks() throws {
        let setup = try Self.setup(files: 20, size: 32 << 10)
        var refusals = 0
        for _ in 0..<12 {
            #expect(try run(CLI.binary, Array(Self.unpack(setup, 1).dropFirst())).status == 0)
            let higher = [CLI.binary, "unpack", setup.packages[3]!, "--dest", setup.app, "--pubkey", setup.work.publicDER]
            let lower = [CLI.binary, "unpack", setup.packages[2]!, "--dest", setup.app, "--pubkey", setup.work.publicDER]
            let statuses = try run("python3", ["-c", Self.together] + higher + ["--"] + lower).stdoutText
                .split(separator: " ").map { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            #expect(statuses.first == 0, "the higher sequence installs: \(statuses)")
            #expect(try Self.installedSequence(setup) == 3, "statuses \(statuses)")
            if statuses.last == 1 { refusals += 1 }
            #expect(statuses.last == 0 || statuses.last == 1, "the lower one either went first or was refused as a rollback: \(statuses)")
        }
        #expect(try Self.leftovers(setup.parent, "app").isEmpty)
        print("concurrent unpacks: the lower sequence was refused as a rollback \(refusals) of 12 times, and never installed last")
    }

    @Test("a second unpack that cannot get the lock in --wait seconds fails with exit 5 and names the holder")
    func busyDestination() throws {
        let setup = try Self.setup(files: 4, size: 1 << 10)
        #expect(try run(CLI.binary, Array(Self.unpack(setup, 1).dropFirst())).status == 0)
        // Hold the lock as unpack does (flock on .app.signet-lock) from another process.
        let hold = pythonScript("interruption_hold.py")
        let result = try run("python3", ["-c", hold, setup.parent + "/.app.signet-lock"] + Self.unpack(setup, 2, extra: ["--wait", "0.3"])).stdoutText
        #expect(result.hasPrefix("5\n"), "\(result)")
        #expect(result.contains("is being updated by process"), "\(result)")
        #expect(try Self.installedSequence(setup) == 1)
    }

    @Test("reverify during a stream of updates never reports a mix of two versions")
    func reverifyDuringUpdates() throws {
        let setup = try Self.setup(files: 60, size: 16 << 10)
        #expect(try run(CLI.binary, Array(Self.unpack(setup, 1).dropFirst())).status == 0)
        let loop = pythonScript("interruption_loop.py")
        let separator = "\u{1f}"
        let reverify = [CLI.binary, "reverify", setup.app, "--pubkey", setup.work.publicDER]
        let result = try run(
            "python3",
            [
                "-c", loop, Self.unpack(setup, 2).joined(separator: separator),
                Self.unpack(setup, 3).joined(separator: separator), reverify.joined(separator: separator)
            ])
        let statuses = result.stdoutText.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(statuses.count >= 5, "reverify ran during the updates: \(statuses.count) times")
        #expect(statuses.allSatisfy { $0 == 0 }, "every reverify saw one whole tree: \(statuses) \(result.stderr.prefix(2000))")
    }
}
