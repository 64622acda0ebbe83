/// The `.signet/` layout that packages and installed trees share (FORMAT.md §2, §3), and the
/// attribute names installed files carry: the one place these names are spelled.
package enum TreeLayout {
    /// The folder of Signet's own entries, at the top of a package and of an installed tree.
    package static let directory = ".signet"
    /// The signed manifest.
    package static let manifest = ".signet/manifest.json"
    /// The manifest's signature.
    package static let manifestSignature = ".signet/manifest.json.sig"
    /// The folder of per-resource signatures.
    package static let signatures = ".signet/sigs"
    /// An installed tree's record of the signature it installed for each file, so that a tree
    /// check compares each `user.signet.sig` with it instead of verifying every one, and
    /// `--repair` can restore a lost attribute (FORMAT.md §3).
    package static let signatureRecord = ".signet/signatures"
    /// The publisher's signature over that record, made by pack (so a tree check can believe
    /// the record after one verification, not one per file); copied into the installed tree.
    package static let signatureRecordSignature = ".signet/signatures.sig"
    /// The folder of an installed tree's copies of its structured resources as signed, which
    /// re-verification compares key by key with the resources (FORMAT.md §3).
    static let structuredCopies = ".signet/structured"
    /// Marks a tree installed from a bare package (no manifest): its signatures are the
    /// sidecars under `.signet/sigs/` (and the files' attributes). Written by unpack `--bare`.
    package static let bareMarker = ".signet/bare"
    /// The chunk-index entry of a package whose chunked resources keep their indexes out of the
    /// manifest (FORMAT.md §2, "The chunk-index entry"). Named for the first Signet
    /// that reads it: an older one refuses the package naming this entry, so naming the version.
    package static let chunkIndex = ".signet/needs-signet-0.2/chunk-index"
    /// A staging tree's folder of range answers as they arrived (``RangeJournal``), for the
    /// next run after one killed mid-answer; removed before the tree is installed, never in a
    /// package or an installed tree.
    package static let rangeJournal = ".signet/ranges-in-flight"
    /// The folder of certificates.
    package static let certificates = ".signet/certs"
    /// The signer's certificate.
    package static let signerCertificate = ".signet/certs/signer.der"

    /// Where the signature of resource `path` is: `.signet/sigs/PATH.sig`.
    package static func signature(of path: String) -> String { signatures + "/" + path + ".sig" }

    /// Where an installed tree keeps the signed copy of structured resource `path`.
    package static func structuredCopy(of path: String) -> String { structuredCopies + "/" + path }

    /// The resource a signature entry name belongs to, if `name` is `.signet/sigs/PATH.sig`.
    package static func resource(ofSignature name: String) -> String? {
        guard name.hasPrefix(signatures + "/"), name.hasSuffix(".sig") else { return nil }
        return String(name.dropFirst(signatures.count + 1).dropLast(4))
    }

    /// The n-th intermediate certificate (1-based, leaf-most first): `.signet/certs/chain-N.der`.
    package static func chainCertificate(_ index: Int) -> String { certificates + "/chain-\(index).der" }

    /// N, if `name` is `chain-N.der` or `.signet/certs/chain-N.der`.
    package static func chainIndex(of name: String) -> UInt? {
        let base = name.hasPrefix(certificates + "/") ? String(name.dropFirst(certificates.count + 1)) : name
        guard base.hasPrefix("chain-"), base.hasSuffix(".der") else { return nil }
        return UInt(base.dropFirst(6).dropLast(4))
    }

    /// Whether an archive entry name lies under `.signet/`.
    package static func isSignetEntry(_ name: String) -> Bool { name.hasPrefix(directory + "/") }

    /// The attribute holding a file's raw signature.
    package static let signatureAttribute = "user.signet.sig"
    /// The attribute holding a file's informational metadata (compact JSON).
    package static let metadataAttribute = "user.signet.meta"
}
