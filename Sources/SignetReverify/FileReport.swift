import Foundation
import Synchronization
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

/// One file's re-verification.
public struct FileReport: Sendable {
    /// The path (relative to the tree's root in a tree report).
    public let path: String
    /// The verdict.
    public let verdict: FileVerdict
    /// A sentence for a person.
    public let detail: String
    /// Where the signature came from, when one was found.
    public let signatureSource: SignatureSource?
    /// The key that verified it.
    public let signer: KeyID?
    /// For a structured resource whose bytes differ from the signed ones: every key path that
    /// changed, was added or was removed, each marked allowed or not. Empty otherwise.
    public internal(set) var changedKeys: [KeyChange] = []
    /// For an `unreadable` file checked on its own: the error that made it so (its code tells a
    /// missing file, exit 5, from a directory or link given as a file, exit 4).
    public internal(set) var error: SignetError? {
        get { errorBox?.error }
        set { errorBox = newValue.map(ErrorBox.init) }
    }
    /// The error kept behind one pointer: a report of 50,000 files holds 50,000 of these, and a
    /// `SignetError` inline would make each one 150 bytes larger.
    var errorBox: ErrorBox? = nil
    final class ErrorBox: Sendable {
        let error: SignetError
        init(_ error: SignetError) { self.error = error }
    }
}
