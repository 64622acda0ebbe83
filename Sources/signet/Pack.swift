import ArgumentParser
import Signet

struct Pack: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pack",
        abstract: "Pack resources, their signatures and a signed manifest into a package (zip).",
        usage: """
            signet pack <path> ... --key <key> --name <name> --version <version>
                         --out <pkg.zip> [<options>]
            """,
        discussion: """
            A FILE becomes a resource named after it; a DIRECTORY contributes its contents, named \
            relative to that directory. Only regular files are packed: symbolic links, devices and \
            sockets are refused (or, with --follow-symlinks, what links point to is packed).

            Resources are deflated, except already-compressed types (png, jpg, zip, gz, xz, zst, \
            mp4, ...) and data deflate would not shrink, which are stored. The same inputs, key, \
            name, version, sequence and SOURCE_DATE_EPOCH give a byte-identical package.

            pack holds the package to the limits unpack applies (--max-files, --max-total-size, \
            --max-ratio, with unpack's defaults) and refuses one that a default unpack would refuse; \
            give the same flags to pack and to the clients' unpack to go beyond them.

            --exclude leaves files and folders out (a folder left out is not walked). A package \
            carries each resource's signature itself, so detached signatures made with signet sign \
            (FILE.sig beside FILE) are not resources: pack warns when it finds one, and \
            --exclude '*.sig' leaves them out.

            Without --sequence, the sequence is SOURCE_DATE_EPOCH if set, else the current Unix \
            time, and pack says which. Devices refuse a sequence lower than the one installed, so a \
            fleet that numbers its releases (142, 143, ...) must give --sequence every time: one \
            package made without it carries a time-sized number that the next ones cannot exceed.

            --structured marks JSON and property list (XML or binary) resources whose keys may \
            legitimately change after installation (a serial number, a server URL): each is parsed \
            now (a file that does not parse is exit 4) and recorded in the manifest, so that \
            reverify --allow-key can accept changes to named keys and report every other one.

            Examples:
              signet pack dist/ --key keys/private_key.pem --name app --version 1.4.2 \\
                --sequence 142 --out app-1.4.2.zip
              signet pack dist/ --exclude '*.sig' --exclude 'tmp/' \\
                --key keys/private_key.pem --name app --version 1.4.2 --sequence 142 \\
                --out app-1.4.2.zip
            """
    )

    @Argument(help: ArgumentHelp("Files and directories to pack.", valueName: "path"))
    var paths: [String] = []

    @OptionGroup var key: SigningKeyOptions

    @OptionGroup(title: "Encryption") var recipients: RecipientOptions

    @Option(name: .long, help: "Package name; clients compare sequence numbers per name.")
    var name: String

    @Option(name: .long, help: "Version string, for people.")
    var version: String

    @Option(name: .long, parsing: .unconditional, help: "Release counter that only grows (default: SOURCE_DATE_EPOCH, else the current UNIX time).")
    var sequence: UInt64?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Clients refuse the package after this UTC time (e.g. 2027-01-01T00:00:00Z; a date alone, 2027-01-01, is its midnight UTC).", valueName: "time"))
    var expires: String?

    @Option(name: .long, help: ArgumentHelp("Where to write the package.", valueName: "pkg.zip"))
    var out: String

    @Option(name: .long, help: "Signature algorithm.")
    var algorithm: SignatureAlgorithm = .default

    @Option(name: .long, help: ArgumentHelp("The signer's X.509 certificate for the signing key, stored in the package (DER or PEM).", valueName: "signer.der"))
    var cert: String?

    @Option(name: .long, help: ArgumentHelp("An intermediate certificate, leaf-most first; repeatable.", valueName: "intermediate.der"))
    var chain: [String] = []

    @Flag(name: .long, help: "Store every resource without compression.")
    var store = false

    @Option(name: .customLong("compression-level"), parsing: .unconditional, help: "Deflate level, 1 (fast) to 9 (small).")
    var compressionLevel: Int = 6

    @Option(
        name: .customLong("chunk-threshold"), parsing: .unconditional,
        help: ArgumentHelp(
            "Resources of at least this many bytes get a chunk index (compressible ones are deflated in 8 KiB segments), so that devices updating them fetch only the chunks and blocks they lack; 0: none, which also makes a package Signet 0.1.0 installs (default 4194304, 4 MiB).",
            valueName: "bytes"))
    var chunkThreshold: UInt64 = PackOptions.defaultChunkThreshold

    @Flag(name: .long, help: "Record each file's fs-verity digest (SHA-256, 4 KiB blocks) in the signed manifest, for devices that install with fs-verity.")
    var verity = false

    @Flag(name: .customLong("follow-symlinks"), help: "Pack what symbolic links point to instead of refusing them.")
    var followSymlinks = false

    @Flag(name: .long, help: "Replace --out if it exists (without it, an existing package is refused and nothing is written).")
    var force = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "JSON or property list files that reverify may compare key by key; a glob with .gitignore's rules ('*.json' a name anywhere, 'config/*.json' only directly in config/, 'config/**/*.json' at any depth); repeatable.",
            valueName: "glob"))
    var structured: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Leave out files and folders: a glob with .gitignore's rules, as for --structured ('*.sig', 'build/', 'docs/**/*.tmp'); repeatable.",
            valueName: "glob"))
    var exclude: [String] = []

    @OptionGroup var limits: LimitOptions

    @OptionGroup(title: "Events") var events: EventOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if paths.isEmpty { throw ValidationError("name at least one file or directory to pack") }
        if let expires, Self.time(expires) == nil {
            throw ValidationError("--expires takes a UTC time like 2027-01-01T00:00:00Z, or a date like 2027-01-01 (midnight UTC), not '\(expires)'")
        }
        if !(1...9).contains(compressionLevel) { throw ValidationError("--compression-level must be 1 to 9") }
        if store && compressionLevel != 6 { throw ValidationError("--store and --compression-level contradict each other") }
    }

    func run() throws {
        try events.start()
        Signals.onInterrupt("no package was written: '\(out)' is as it was (the temporary file is removed)")
        let privateKey = try key.load()
        // Every recipient certificate is read before anything is packed.
        let sealTo = try recipients.load()
        // Refused once the key is known to be usable, before any file is read.
        if !force {
            try OutputFiles.refuseExisting(out, what: "the package", inputs: paths + key.files + (cert.map { [$0] } ?? []) + chain + recipients.files)
        }
        let options0 = PackOptions(
            name: name, version: version, sequence: sequence, expires: expires.flatMap(Self.time),
            compression: store ? .store : .automatic(level: compressionLevel), followSymlinks: followSymlinks)
        var options = options0
        options.certificate = try cert.map { try certificateDER($0) }
        options.chain = try chain.map { try certificateDER($0) }
        options.limits = limits.limits
        options.structured = structured
        options.exclude = exclude
        options.protecting = key.files + (cert.map { [$0] } ?? []) + chain
        options.replace = force
        options.chunkThreshold = chunkThreshold == 0 ? nil : chunkThreshold
        options.verity = verity
        // Encrypted: sign, then encrypt (the library makes the signed package beside OUT and
        // seals it into OUT).
        options.encryptTo = sealTo
        options.envelopeCipher = recipients.cipher
        options.rsaPadding = recipients.padding
        Events.current?.phase("pack")
        let result = try ProgressLine.showing("packing " + out, output: output) { progress in
            options.progress = progress
            return try PackageBuilder.pack(paths, to: out, signer: Signer(key: privateKey, algorithm: algorithm), options: options)
        }
        let manifest = result.manifest
        let signatures = Self.detachedSignatures(manifest.files.map(\.path))
        if !signatures.isEmpty {
            let shown = signatures.prefix(3).map { "'\($0)'" }.joined(separator: ", ") + (signatures.count > 3 ? ", ..." : "")
            Output.warn(
                "\(signatures.count) resource\(signatures.count == 1 ? " is a detached signature" : "s are detached signatures") of another resource (\(shown)); a package carries each resource's signature itself: leave them out with --exclude '*.sig'"
            )
        }
        let source = SequenceSource(given: sequence != nil)
        Output.result(
            PackReport(
                package: PackageReport(
                    package: out, manifest: manifest,
                    storage: { [compression = result.compression, sizes = result.compressedSizes] path in
                        compression[path].map { (compression: $0, compressedSize: sizes[path]) }
                    }),
                sequence_source: source.rawValue), json: output.json)
        if output.json { return }
        let total = manifest.files.reduce(UInt64(0)) { $0 + $1.size }
        Output.line("packed \(manifest.files.count) file\(manifest.files.count == 1 ? "" : "s") (\(total) bytes) into \(out)")
        if !sealTo.isEmpty {
            Output.line("  encrypted to \(sealTo.count) device\(sealTo.count == 1 ? "" : "s") (\(recipients.cipher.rawValue) envelope)")
        }
        Output.line("  \(manifest.name) \(manifest.version), sequence \(manifest.sequence), \(manifest.algorithm.id), key \(manifest.keyID.short)")
        switch source {
        case .option: break
        case .sourceDateEpoch:
            Output.line("  sequence \(manifest.sequence) is SOURCE_DATE_EPOCH (no --sequence given)")
        case .time:
            Output.line(
                "  sequence \(manifest.sequence) is the current Unix time (no --sequence given); a fleet that numbers its releases gives --sequence N, as devices refuse a lower sequence than the one installed"
            )
        }
    }

    /// Where the sequence came from (`sequence_source` in --json).
    enum SequenceSource: String {
        case option, sourceDateEpoch = "source-date-epoch", time
        init(given: Bool) {
            self = given ? .option : PackOptions.sourceDateEpoch != nil ? .sourceDateEpoch : .time
        }
    }

    /// The resources that are another resource's detached signature (`a.txt.sig` beside `a.txt`).
    static func detachedSignatures(_ paths: [String]) -> [String] {
        let all = Set(paths)
        return paths.filter { $0.hasSuffix(".sig") && all.contains(String($0.dropLast(4))) }
    }

    /// pack's --json: the package (as inspect reports it) and where its sequence came from.
    struct PackReport: Encodable {
        let package: PackageReport
        /// "option" (--sequence), "source-date-epoch" or "time" (the current Unix time).
        let sequence_source: String

        private enum Keys: String, CodingKey { case sequence_source }
        func encode(to encoder: Encoder) throws {
            try package.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(sequence_source, forKey: .sequence_source)
        }
    }

    /// An RFC 3339 UTC time, or a date alone (`2027-01-01`), which means its midnight UTC.
    static func time(_ text: String) -> Timestamp? {
        if let time = Timestamp(rfc3339: text) { return time }
        guard text.utf8.count == 10, text.range(of: #"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"#, options: .regularExpression) != nil else { return nil }
        return Timestamp(rfc3339: text + "T00:00:00Z")
    }

    private func certificateDER(_ path: String) throws -> [UInt8] {
        guard let der = try PublicKey(contentsOf: path, allowWeakKey: true).certificateDER else {
            throw SignetError(.wrongKeyKind, "'\(path)' is a public key, not a certificate", path: path)
        }
        return der
    }
}
