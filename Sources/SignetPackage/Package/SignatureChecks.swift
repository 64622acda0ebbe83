import Dispatch
import Foundation
import SignetCore
import SignetCrypto
import SignetManifest

/// Verifies resource signatures on a second thread while the calling thread goes on reading,
/// hashing and staging the next files: with one RSA public-key operation per file, the
/// signature checks of a 50,000-file package are a fifth of the work of installing it, and
/// they need nothing but the digest the caller already has.
///
/// Nothing is believed before ``finish()``: the caller stages files (never installs them) while
/// their checks are pending, and asks for the outcome before anything is put in place. At most
/// ``window`` checks wait at a time (a signature and a digest each), so memory stays flat in the
/// number of files. The failure reported is the first in manifest order, as it would be if the
/// checks were made one by one.
package final class SignatureChecks: @unchecked Sendable {
    /// Checks waiting at most.
    static let window = 256

    /// A file whose signature did not verify with the manifest's key.
    struct Failure {
        let index: Int
        let file: Manifest.File
        let signature: [UInt8]
        let digest: Digest
    }

    /// Checks handed to the second core at once: one wake-up (a `futex` pair) per batch, not
    /// per file.
    static let batch = 32

    private let key: PublicKey
    private let algorithm: SignatureAlgorithm
    private let queue = SerialWorker()
    /// Balanced on every path: each `wait` is followed by a block that holds `self` and
    /// signals when it ends, so the semaphore is back at its start value before it can be freed
    /// (libdispatch traps on freeing one that is not).
    private let slots = DispatchSemaphore(value: SignatureChecks.window / SignatureChecks.batch)
    private let lock = NSLock()
    private var failure: Failure?
    /// Checks not yet handed over; touched only by the thread that submits.
    private var pending: [Failure] = []

    package init(key: PublicKey, algorithm: SignatureAlgorithm) {
        self.key = key
        self.algorithm = algorithm
    }

    deinit {
        queue.stop()
    }

    /// Queues the check of file number `index` (in manifest order); waits while ``window``
    /// checks are pending.
    package func submit(index: Int, file: Manifest.File, signature: [UInt8], digest: Digest) {
        // A signature of another length than the key's cannot verify: failed here, never queued,
        // so what waits is at most `window` signatures of the key's length (a package may hold
        // signature entries of up to 64 KiB).
        guard signature.count == key.signatureLength else {
            fail(Failure(index: index, file: file, signature: signature, digest: digest))
            return
        }
        if pending.isEmpty { pending.reserveCapacity(Self.batch) }
        pending.append(Failure(index: index, file: file, signature: signature, digest: digest))
        if pending.count >= Self.batch { handOver() }
    }

    /// Queues the pending checks as one batch; waits while ``window`` checks are queued.
    private func handOver() {
        guard !pending.isEmpty else { return }
        let checks = pending
        pending = []
        slots.wait()
        queue.async { [self] in
            defer { slots.signal() }
            for check in checks where !Verifier.check(check.signature, digest: check.digest, key: key, algorithm: algorithm) {
                fail(check)
            }
        }
    }

    /// Keeps the failure of the lowest index.
    private func fail(_ new: Failure) {
        lock.lock()
        defer { lock.unlock() }
        if failure.map({ new.index < $0.index }) ?? true { failure = new }
    }

    /// Waits for every queued check; the first file (in manifest order) whose signature failed.
    private func finish() -> Failure? {
        handOver()
        queue.drain()
        lock.lock()
        defer { lock.unlock() }
        return failure
    }

    /// Waits for every queued check; the first failure in manifest order, explained by the full
    /// verifier (the message the one-by-one check gives).
    package func firstRejection() -> (failure: PackageVerification.Failure, message: String, entry: String)? {
        guard let failure = finish(),
            case .rejected(let kind, let message, let entry) = PackageReader.signatureCheck(
                failure.file, signature: failure.signature, digest: failure.digest,
                key: key, algorithm: algorithm)
        else { return nil }
        return (kind, message, entry)
    }
}
