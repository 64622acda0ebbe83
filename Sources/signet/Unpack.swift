import ArgumentParser
import Signet

struct Unpack: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify a package and install it into a directory, atomically.",
        discussion: """
        Nothing is written to DIR until the package is verified: its structure and every entry \
        name first, then the manifest signature, expiry, the exact file set, and each file's \
        size, SHA-256 and signature as it streams into a staging directory beside DIR. Each \
        installed file carries its signature in the user.signet.sig extended attribute (and \
        user.signet.meta); DIR/.signet/ keeps the manifest and all signatures. DIR is then \
        swapped for the new tree in one step: at every instant it holds the old or the new tree.

        DIR may be absent, empty, or a tree Signet installed; anything else needs --force. \
        Installing a lower sequence of the same package name is refused (--allow-downgrade).

        Example:
          signet unpack app-1.4.2.zip --dest /opt/app --pubkey keys/public_key.der
        """
    )

    @Argument(help: ArgumentHelp("The package.", valueName: "pkg.zip"))
    var package: String

    @Option(name: .long, help: ArgumentHelp("The directory to install into.", valueName: "dir"))
    var dest: String

    @OptionGroup var trust: TrustOptions

    @Flag(name: .long, help: "The older layout: FILE and FILE.sig pairs, no manifest (no completeness, rollback or expiry guarantee).")
    var bare = false

    @Option(name: .long, help: "Signature algorithm of a --bare package.")
    var algorithm: SignatureAlgorithm = .default

    enum IMAMode: String, ExpressibleByArgument, CaseIterable {
        case user, security
    }

    @Option(name: .long, help: "Also write an IMA v2 signature to user.ima or security.ima (root only), for evmctl and IMA appraisal.")
    var ima: IMAMode?

    @Option(name: .long, help: ArgumentHelp("A file recording the highest sequence installed per package name, across destinations (locked, updated atomically).", valueName: "file"))
    var state: String?

    @Flag(name: .long, help: "Replace a non-empty DIR that Signet did not install.")
    var force = false

    @Flag(name: .customLong("allow-downgrade"), help: "Install a lower sequence over the same package.")
    var allowDowngrade = false

    @OptionGroup var limits: LimitOptions

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
    }

    struct Report: Encodable {
        let destination: String
        let package: String
        let name: String?
        let version: String?
        let sequence: UInt64?
        let replaced_sequence: UInt64?
        let signer: String
        let channel: String?
        let files: [String]
        let attributes: String
        let atomic_exchange: Bool
    }

    func run() throws {
        var options = InstallOptions()
        options.force = force
        options.allowDowngrade = allowDowngrade
        options.bare = bare
        options.bareAlgorithm = algorithm
        options.limits = limits.limits
        options.stateFile = state
        options.imaAttribute = ima.map { $0 == .user ? "user.ima" : "security.ima" }
        let policy = try trust.policy()
        let report = try Installer.install(package, to: dest, policy: policy, options: options)
        if !report.attributesWritten {
            Output.warn("'\(dest)' is on a filesystem without user extended attributes: signatures are kept only in \(dest)/.signet/sigs/")
        }
        if output.json {
            Output.json(Report(destination: dest, package: package, name: report.manifest?.name, version: report.manifest?.version,
                               sequence: report.manifest?.sequence, replaced_sequence: report.replacedSequence,
                               signer: report.signer.keyID.hex, channel: policy.channel(of: report.signer.keyID), files: report.files,
                               attributes: report.attributesWritten ? "xattr" : "sidecar", atomic_exchange: report.exchanged))
            return
        }
        let what = report.manifest.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "bare package"
        let replaced = report.replacedSequence.map { ", replacing sequence \($0)" } ?? ""
        Output.line("installed \(what) into \(dest): \(report.files.count) file\(report.files.count == 1 ? "" : "s") verified, signed by key \(report.signer.keyID.short)\(replaced)")
    }
}
