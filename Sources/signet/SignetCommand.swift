import ArgumentParser
import Foundation
import Signet
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#endif

/// The `signet` command.
///
/// Every command names itself (`commandName:`) rather than letting ArgumentParser derive the
/// name from the type: the derivation is `String(describing:)` of the type, a scan of every
/// protocol conformance in the process per command, a fifth of a small `sign` run's time
/// (bench/README.md).
struct SignetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signet",
        abstract: "Sign resources with RSA keys and verify them, byte-compatible with openssl.",
        discussion: """
            Keys: private keys are read from PEM (PKCS#1, PKCS#8, encrypted or not), DER PKCS#8 or \
            PKCS#12, detected from their content. Public keys from DER or PEM SubjectPublicKeyInfo, \
            PKCS#1 RSAPublicKey or X.509 certificates. Passphrases never go on the command line: use \
            --passphrase-file, --passphrase-env, or type them at the prompt.

            Exit codes:
              0  success / verified
              1  well-formed input that fails verification (bad or wrong-length signature)
              2  usage error
              3  untrusted signer
              4  malformed input: unreadable key, wrong passphrase, unsupported or weak key
              5  environment: missing file, permission denied, I/O error, file exists

            Every subcommand takes --json: one JSON document on stdout (with an "error" object on failure).
            The versions of Signet, OpenSSL and libzip: signet --version.
            """,
        // No `version:` and no root --version option: ArgumentParser would then claim --version in
        // every subcommand, and `signet pack --version 1.0` (FORMAT.md) would misparse.
        // `signet --version` is recognised in main() instead.
        subcommands: [
            Keygen.self, Key.self, Sign.self, Verify.self, Pack.self, Resign.self, Encrypt.self, Inspect.self, Unpack.self, Fetch.self, Reverify.self,
            Status.self,
            Rollback.self, Confirm.self, Trust.self,
            Update.self, Serve.self, Repo.self, Log.self, Witness.self, TUF.self
        ]
    )

    func run() throws {
        print(SignetCommand.helpMessage())
    }

    /// The command words `arguments` start with (`repo add`), as the parser walks them.
    static func commandPath(for arguments: [String]) -> [String] {
        var command: ParsableCommand.Type = SignetCommand.self
        var path: [String] = []
        for word in arguments where !word.hasPrefix("-") {
            guard let next = command.configuration.subcommands.first(where: { $0._commandName == word }) else { break }
            path.append(word)
            command = next
        }
        return path
    }

    /// For `signet help TOPIC...`: the first topic that names no command (ArgumentParser would
    /// print the overview and exit 0), with the commands that do exist there.
    static func unknownHelpTopic(_ topics: [String]) -> (topic: String, known: [String])? {
        var command: ParsableCommand.Type = SignetCommand.self
        for topic in topics where !topic.hasPrefix("-") {
            let subcommands = command.configuration.subcommands
            guard let next = subcommands.first(where: { $0._commandName == topic }) else {
                return (topic, subcommands.map { $0._commandName })
            }
            command = next
        }
        return nil
    }
}

@main
enum Main {
    static func main() {
        // First, before any thread exists: interruptions leave nothing behind.
        Signals.install()
        // With TZ unset, glibc's mktime/localtime stat /etc/localtime on every call, and libzip
        // converts every entry's DOS time when it opens or writes an archive: two system calls
        // per file, a quarter of a 50,000-file inspect's time. The same zone, named once.
        if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        // The allocator, told what a run of many small files needs (bench/README.md):
        // glibc gives a thread that meets a locked arena an arena of its own, each keeping what
        // it freed, and its fast bins never coalesce, so the small buffers freed by one thread
        // and reused by another leave holes the heap grows past. An inspect of 50,000 files
        // peaked at 52-82 MiB by run; with one arena and no fast bins at 48-49 MiB in every
        // run, at the same speed. The user's MALLOC_ARENA_MAX or GLIBC_TUNABLES win.
        if getenv("MALLOC_ARENA_MAX") == nil && getenv("GLIBC_TUNABLES") == nil {
            _ = signet_limit_malloc_arenas(1)
            _ = signet_disable_malloc_fastbins()
        }
        let wantsJSON = CommandLine.arguments.dropFirst().contains("--json")
        let flags = Set(CommandLine.arguments.dropFirst())
        if flags == ["--version"] {
            print(SignetVersion.summary)
            exit(0)
        }
        if flags == ["--version", "--json"] {
            // libcurl is not loaded for this (it is loaded on a first download): its version is
            // not part of the document.
            Output.json(VersionReport(signet: SignetVersion.signet, openssl: SignetVersion.openSSL, libzip: SignetVersion.libzip))
            exit(0)
        }
        let arguments = Array(CommandLine.arguments.dropFirst())
        Output.quiet = arguments.contains("--quiet") && !wantsJSON
        if arguments.first == "help", let (topic, known) = SignetCommand.unknownHelpTopic(Array(arguments.dropFirst())) {
            Output.usageFailure(
                message: "there is no command '\(topic)'", fullText: known.isEmpty ? "" : "the commands are: \(known.joined(separator: ", "))", json: wantsJSON)
        }
        do {
            var command = try SignetCommand.parseAsRoot()
            try command.run()
        } catch let error as SignetError {
            // A value refused while the command ran is a usage error like one refused while
            // parsing: the subcommand's usage follows the message.
            let command = ArgumentErrors.command(for: arguments)
            let name = SignetCommand.commandPath(for: arguments).joined(separator: " ")
            let usage =
                "Usage: \(SignetCommand.usageString(for: command).trimmingCharacters(in: .whitespacesAndNewlines))\n  See 'signet \(name.isEmpty ? "" : name + " ")--help' for more information."
            Output.fail(error, json: wantsJSON, usage: usage)
        } catch let exitCode as ExitCode {
            if exitCode.rawValue != 0 { Output.releaseHeld() }
            exit(exitCode.rawValue)
        } catch let error as NSError where error.domain == NSCocoaErrorDomain || error.domain == NSPOSIXErrorDomain {
            // A Foundation error that escaped the library: Signet's own words and exit 5, never
            // Foundation's text (FORMAT.md §4).
            Output.fail(SignetError.environment(error), json: wantsJSON)
        } catch {
            let code = SignetCommand.exitCode(for: error)
            // An unknown option is said before any rule about the other arguments (its value,
            // perhaps a secret, was taken as one of them); the value is never repeated.
            if code != .success, let unknown = ArgumentErrors.firstUnknownOption(in: arguments),
                !SignetCommand.message(for: error).hasPrefix("Unknown option")
            {
                Output.usageFailure(
                    message: "Unknown option '\(unknown)'",
                    fullText: SignetCommand.fullMessage(for: error), json: wantsJSON)
            }
            // ArgumentParser wraps what validate() throws; a SignetError recorded there keeps its code.
            if let failure = ValidationFailure.recorded { Output.fail(failure, json: wantsJSON) }
            if code == .success {
                // --help and --version.
                print(SignetCommand.fullMessage(for: error))
                exit(0)
            }
            // Everything ArgumentParser rejects is a usage error: exit 2 (FORMAT.md §4), not its 64.
            Output.usageFailure(
                message: SignetCommand.message(for: error),
                fullText: SignetCommand.fullMessage(for: error), json: wantsJSON)
        }
    }
}

/// A ``SignetError`` thrown while options were validated (reading `--config`): ArgumentParser
/// wraps whatever `validate()` throws as a usage error, which it is not.
enum ValidationFailure {
    nonisolated(unsafe) private static var failure: SignetError?
    static func record(_ error: SignetError) { failure = error }
    static var recorded: SignetError? { failure }
}

/// `signet --version --json`.
struct VersionReport: Encodable {
    let signet: String
    let openssl: String
    let libzip: String
}
