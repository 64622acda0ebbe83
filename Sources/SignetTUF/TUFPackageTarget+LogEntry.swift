import SignetCore
import SignetCrypto

extension TUFPackageTarget {
    /// The entry that stands for this release in a transparency log (FORMAT.md §10): what a
    /// device has verified of it before anything is fetched — name, version, sequence, the
    /// signed manifest's SHA-256, the package's SHA-256 and length — one `key value` line each
    /// under the line `signet.release/v1`. A value with a control character has no entry
    /// (`.malformedMetadata`): a log line cannot hold it.
    public func logEntry() throws -> [UInt8] { try releaseEntry().bytes }

    /// The entry as a value (`ReleaseEntry`, in the crypto layer).
    public func releaseEntry() throws -> ReleaseEntry {
        guard length >= 0 else { throw SignetError(.malformedMetadata, "the release's length \(length) is negative", path: target) }
        do {
            return try ReleaseEntry(
                name: name, version: version, sequence: sequence, manifestSHA256: manifestSHA256, targetSHA256: sha256, targetLength: UInt64(length))
        } catch let error as SignetError {
            throw SignetError(error.code, error.reason, path: target)
        }
    }

    /// The leaf hash of ``logEntry()`` (RFC 6962: SHA-256 of 0x00 and the entry).
    public func logLeafHash() throws -> [UInt8] { TileTree.leafHash(try logEntry()) }
}
