import ArgumentParser
import Foundation
import Signet

/// `signet log`: the repository's transparency log (FORMAT.md §10).
struct Log: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Keep every release in a transparency log that witnesses cosign and devices check.",
        discussion: """
            The log is REPO/log, static files (c2sp.org/tlog-tiles) the web server publishes \
            beside metadata/ and targets/; each release's proof is beside its package \
            (targets/SHA256.NAME.tlog-proof). The log key is Ed25519 (a PEM file); witnesses \
            cosign each new checkpoint over c2sp.org/tlog-witness. Devices enforce the policy \
            the root carries once its key holders have signed it.

            Example:
              openssl genpkey -algorithm ed25519 -out log.pem
              signet log vkey log.pem --name example.com/app-log
              signet log init site --key log.pem --policy tlog-policy
              signet repo sign site --role root --key r1.pem --digest HEX
              signet repo add site app-1.4.2.zip --channel stable --key t.pem
              signet log append site --key log.pem
              signet repo refresh site --snapshot-key s.pem --timestamp-key ts.pem
              signet log monitor site
            """,
        subcommands: [VKey.self, Init.self, Policy.self, Append.self, Status.self, Monitor.self, Verify.self]
    )

    /// A note key from a PEM Ed25519 private key; `name` or, for the log's key, the name the
    /// policy gives its public half.
    static func signer(_ path: String, name: String?, policy: TransparencyPolicy?, witness: Bool = false) throws -> NoteSignerKey {
        let pem = try InputFile.open(path, what: "the log key", followSymlinks: true).readAll(limit: 64 << 10, what: "the log key")
        let type: NoteSignatureType = witness ? .cosignatureV1 : .ed25519
        if let name { return try NoteSignerKey(name: name, pem: pem, type: type) }
        let probe = try NoteSignerKey(name: "probe", pem: pem, type: type)
        guard let log = policy?.logs.first(where: { $0.key.publicKey == probe.verifier.publicKey }) else {
            throw SignetError(.untrustedSigner, "'\(path)' is not the key of a log the repository's policy names", path: path)
        }
        return try NoteSignerKey(name: log.key.name, pem: pem, type: type)
    }

    /// A policy file read and parsed; on a device (`option` names it) first checked as a trust
    /// input: owned by root or this user, writable by no one else.
    static func policy(_ path: String, deviceOption option: String? = nil) throws -> TransparencyPolicy {
        if let option { try TrustedInput.check(path, what: option) }
        let text = try InputFile.open(path, what: "the policy", followSymlinks: true).readAll(limit: 1 << 20, what: "the policy")
        return try TransparencyPolicy(text: String(decoding: text, as: UTF8.self))
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    struct VKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "vkey",
            abstract: "Print the verifier key (NAME+HASH+BASE64) of an Ed25519 key, for a policy.",
            discussion: """
                A log's name is its origin (example.com/app-log); a witness's key is a cosigner \
                key (--witness). The private key is never printed.
                """)
        @Argument(help: ArgumentHelp("The Ed25519 private key (PEM).", valueName: "key.pem"))
        var key: String
        @Option(name: .long, help: ArgumentHelp("The log's origin, or the witness's name.", valueName: "name"))
        var name: String
        @Flag(name: .long, help: "A witness's cosigner key (signature type 0x04).")
        var witness = false
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let vkey: String
            let name: String
            let witness: Bool
        }

        func run() throws {
            let vkey = try Log.signer(key, name: name, policy: nil, witness: witness).verifier.description
            Output.result(Report(vkey: vkey, name: name, witness: witness), json: output.json)
            if !output.json { Output.line(vkey) }
        }
    }

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Start REPO's log and stage the next root with its policy.",
            discussion: """
                POLICY is a c2sp.org/tlog-policy file: `log VKEY` (this log), `witness NAME VKEY \
                URL` for each witness (URL: its submission prefix), `group NAME K MEMBER…` and \
                `quorum NAME`. It is staged into the next root as custom.signet.tlog: once the \
                root key holders sign it and `repo refresh` publishes it, devices install only \
                releases the log holds under that quorum.
                """)
        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("The log's Ed25519 private key (PEM).", valueName: "key.pem"))
        var key: String
        @Option(name: .long, help: ArgumentHelp("The transparency policy (c2sp.org/tlog-policy).", valueName: "file"))
        var policy: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let origin: String
            let vkey: String
            let log: String
            let root_version: Int64
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let parsed = try Log.policy(policy)
            let signer = try Log.signer(key, name: nil, policy: parsed)
            let version = try repo.createLog(key: signer, policy: parsed)
            Output.result(
                Report(origin: signer.verifier.name, vkey: signer.verifier.description, log: repo.logDirectory, root_version: version), json: output.json)
            if output.json || output.quiet { return }
            Output.line(
                "started log \(signer.verifier.name) in \(repo.logDirectory); staged root v\(version) with its policy: the root key holders sign it (`signet repo sign \(repository) --role root --key KEY`), then `signet log append \(repository) --key \(key)` logs the listed releases"
            )
        }
    }

    struct Policy: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "policy",
            abstract: "Stage the next root with another policy (witnesses, quorum).",
            discussion: """
                The publisher's copy is replaced at once (the next append gathers cosignatures \
                under it); devices enforce it once the root key holders have signed the staged \
                root and `repo refresh` has published it. The policy must still name the log's key.
                """)
        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Argument(help: ArgumentHelp("The new transparency policy (c2sp.org/tlog-policy).", valueName: "file"))
        var policy: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let root_version: Int64
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let version = try repo.replaceLogPolicy(try Log.policy(policy))
            Output.result(Report(root_version: version), json: output.json)
            if output.json || output.quiet { return }
            Output.line("staged root v\(version) with the new policy: the root key holders sign it (`signet repo sign \(repository) --role root --key KEY`)")
        }
    }

    struct Append: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "append",
            abstract: "Log every release REPO lists that the log lacks; write each proof.",
            usage: """
                signet log append <repo> --key <key.pem> [--max-time <seconds>]
                                  [<options>]
                """,
            discussion: """
                The new checkpoint is sent to the policy's witnesses in order until its quorum \
                has cosigned it; only then is it published (else exit 3 and nothing changes for \
                readers). Each listed release's proof is then written beside its package. `repo \
                refresh` refuses a targets version with a release the log does not hold.
                """)
        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("The log's Ed25519 private key (PEM).", valueName: "key.pem"))
        var key: String
        @Option(name: .customLong("max-time"), help: ArgumentHelp("Seconds for all witness requests (default 60).", valueName: "seconds"))
        var maxTime: Double = 60
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            struct Entry: Encodable {
                let target: String
                let index: Int
            }
            let appended: [Entry]
            let size: UInt64
            let root_hash: String
            let cosigners: [String]
            let refusals: [String]
            let proofs: Int
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let signer = try Log.signer(key, name: nil, policy: try repo.logPolicy())
            var download = DownloadOptions()
            download.maxTime = maxTime
            let outcome = try repo.appendToLog(key: signer, download: download)
            Output.result(
                Report(
                    appended: outcome.appended.map { Report.Entry(target: $0.target, index: $0.index) }, size: outcome.checkpoint.size,
                    root_hash: Log.hex(outcome.checkpoint.rootHash), cosigners: outcome.cosigners, refusals: outcome.refusals, proofs: outcome.proofs),
                json: output.json)
            if output.json { return }
            for refusal in outcome.refusals { Output.warn("witness \(refusal)") }
            if output.quiet { return }
            for (target, index) in outcome.appended { Output.line("logged \(target) as entry \(index)") }
            if !outcome.appended.isEmpty {
                Output.line(
                    "published checkpoint \(outcome.checkpoint.size) cosigned by \(outcome.cosigners.isEmpty ? "no witness (quorum none)" : outcome.cosigners.joined(separator: ", "))"
                )
            } else {
                Output.line("the log holds every listed release (checkpoint \(outcome.checkpoint.size))")
            }
            Output.line("wrote \(outcome.proofs) proof\(outcome.proofs == 1 ? "" : "s") beside the packages")
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Show REPO's log: its checkpoint and which listed releases it lacks.",
            discussion: "Exit 3 (not-logged) when a release REPO lists is not in the published log.")
        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let origin: String
            let size: UInt64
            let root_hash: String
            let cosigners: [String]
            let unlogged: [String]
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let status = try repo.logStatus()
            Output.result(
                Report(
                    origin: status.checkpoint.origin, size: status.checkpoint.size, root_hash: Log.hex(status.checkpoint.rootHash),
                    cosigners: status.cosigners, unlogged: status.unlogged), json: output.json)
            if output.json {
                if !status.unlogged.isEmpty { throw ExitCode(SignetError.Code.notLogged.exitStatus.rawValue) }
                return
            }
            Output.line(
                "log \(status.checkpoint.origin): \(status.checkpoint.size) entries, root \(status.checkpoint.rootHash.map { String(format: "%02x", $0) }.joined())"
            )
            Output.line("cosigned by: \(status.cosigners.isEmpty ? "none" : status.cosigners.joined(separator: ", "))")
            for target in status.unlogged { Output.line("not logged: \(target)") }
            if !status.unlogged.isEmpty { throw ExitCode(SignetError.Code.notLogged.exitStatus.rawValue) }
        }
    }

    struct Monitor: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "monitor",
            abstract: "List logged releases of REPO's packages that no targets version lists.",
            discussion: """
                REPO is the repository's folder or a mirror of what its server publishes \
                (metadata/ and log/). Such a release was signed with a targets key and shown to \
                some devices only. Exit 1 when there is one.
                """)
        @Argument(help: ArgumentHelp("The repository folder, or a mirror of it.", valueName: "repo"))
        var repository: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            struct Unlisted: Encodable {
                let index: Int
                let name: String
                let version: String
                let sequence: String
                let manifest_sha256: String
            }
            let entries: Int
            let unlisted: [Unlisted]
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let (logged, unlisted) = try repo.unlistedLogEntries()
            Output.result(
                Report(
                    entries: logged,
                    unlisted: unlisted.map {
                        Report.Unlisted(index: $0.index, name: $0.name, version: $0.version, sequence: $0.sequence, manifest_sha256: $0.manifestSHA256)
                    }), json: output.json)
            if output.json {
                if !unlisted.isEmpty { throw ExitCode(1) }
                return
            }
            for release in unlisted {
                Output.line(
                    "UNLISTED entry \(release.index): \(release.name) \(release.version) (sequence \(release.sequence), manifest \(release.manifestSHA256.prefix(16))…) is in the log but in no published targets version"
                )
            }
            if unlisted.isEmpty { Output.line("\(logged) entries: every release of this repository's packages is listed") }
            if !unlisted.isEmpty { throw ExitCode(1) }
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check a release's log proof offline against a policy.",
            usage: """
                signet log verify <proof> --policy <file> [--entry <file>]
                                  [<options>]
                """,
            discussion: """
                The entry is the proof's own (its `extra` line, as `signet log append` writes \
                it) or --entry FILE. Exit 0 when the log signed the checkpoint, the policy's \
                quorum cosigned it and the entry is in its tree; else exit 3 (not-logged). \
                Nothing is kept: a device's update and unpack also hold the checkpoint to the \
                largest one they saw.
                """)
        @Argument(help: ArgumentHelp("The proof (c2sp.org/tlog-proof).", valueName: "proof"))
        var proof: String
        @Option(name: .long, help: ArgumentHelp("The transparency policy (c2sp.org/tlog-policy).", valueName: "file"))
        var policy: String
        @Option(name: .long, help: ArgumentHelp("The entry to look for (default: the proof's).", valueName: "file"))
        var entry: String?
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let origin: String
            let index: UInt64
            let size: UInt64
            let cosigners: [String]
            @Null var name: String?
            @Null var version: String?
            @Null var sequence: UInt64?
        }

        func run() throws {
            let policy = try Log.policy(self.policy)
            let bytes = try InputFile.open(proof, what: "the log proof").readAll(limit: TransparencyProof.largest, what: "the log proof")
            let parsed = try TransparencyProof(bytes)
            let entryBytes = try entry.map { try InputFile.open($0, what: "the entry").readAll(limit: 1 << 16, what: "the entry") } ?? parsed.extra
            guard let entryBytes else {
                throw SignetError(.notLogged, "the proof carries no entry (an `extra` line): give the entry with --entry FILE", path: proof)
            }
            let release = try? ReleaseEntry(entryBytes)
            let (checkpoint, _) = try parsed.verify(leaf: TileTree.leafHash(entryBytes), policy: policy)
            let note = try SignedNote.open(parsed.checkpoint, known: policy.logs.map(\.key) + policy.witnesses.map(\.key))
            let cosigners = policy.witnesses.filter { note.verifiedBy.contains($0.key) }.map(\.name)
            Output.result(
                Report(
                    origin: checkpoint.origin, index: parsed.index, size: checkpoint.size, cosigners: cosigners, name: release?.name,
                    version: release?.version, sequence: release?.sequence), json: output.json)
            if output.json || output.quiet { return }
            Output.line(
                "\(release.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "the entry") is entry \(parsed.index) of \(checkpoint.origin)'s checkpoint of \(checkpoint.size), cosigned by \(cosigners.isEmpty ? "no witness (quorum none)" : cosigners.joined(separator: ", "))"
            )
        }
    }
}
